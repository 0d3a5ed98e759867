"""Threads that start and end all the time, and many short-lived child processes: /proc entries vanish
while the sampler reads them."""
import subprocess
import sys
import threading

import torch

a = torch.randn(256, 256)


def work():
    for _ in range(5):
        torch.tanh(a @ a)


for i in range(60):
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if i % 10 == 0:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
print("done")
