"""Killed by SIGKILL half-way through its work (an out-of-memory killer would do the same)."""
import os
import signal

import torch

a = torch.randn(128, 128)
for i in range(40):
    b = torch.tanh(a @ a)
    if i == 20:
        os.kill(os.getpid(), signal.SIGKILL)
