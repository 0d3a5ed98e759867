"""Starts a child that leaves its process group and session (os.setsid) and outlives the script."""
import os
import subprocess
import sys

import torch

subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(30)"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
a = torch.randn(128, 128)
for _ in range(40):
    b = torch.tanh(a @ a)
print("done", os.getpid())
