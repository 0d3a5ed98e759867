"""Killed by SIGKILL half-way through its work (an out-of-memory killer would do the same).

The work is a comprehension, not a `for` loop, so no pass ends with a loop step window before the kill."""
import os
import signal

import torch

a = torch.randn(128, 128)


def work(i):
    if i == 20:
        os.kill(os.getpid(), signal.SIGKILL)
    return torch.tanh(a @ a)


outputs = [work(i) for i in range(40)]
