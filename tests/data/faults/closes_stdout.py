"""Closes its standard output and error file descriptors, then computes."""
import os

import torch

os.close(1)
os.close(2)
a = torch.randn(128, 128)
for _ in range(40):
    b = torch.tanh(a @ a)
