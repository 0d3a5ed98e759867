"""Computes a little, then waits for an event nobody sets: a hang."""
import threading

import torch

a = torch.randn(128, 128)
for _ in range(20):
    b = torch.tanh(a @ a)
threading.Event().wait()  # nobody sets it
