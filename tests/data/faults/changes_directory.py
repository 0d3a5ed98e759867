"""Changes its working directory before the work: diagnose's files are not where it now is."""
import os

import torch

os.chdir("/")
a = torch.randn(128, 128)
for _ in range(40):
    b = torch.tanh(a @ a)
print("done in", os.getcwd())
