"""Computes a little, then waits for an event nobody sets: a hang.

The work is a comprehension, not a `for` loop: on a loaded machine the loop step detector can find a `for` loop
within its 20 iterations, and a pass then ends with its window, before the wait (tests/e2e/test_faults.py needs
every pass to reach it)."""
import threading

import torch

a = torch.randn(128, 128)
outputs = [torch.tanh(a @ a) for _ in range(20)]
threading.Event().wait()  # nobody sets it
