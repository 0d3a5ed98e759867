"""Threads that start and end all the time, and many short-lived child processes: /proc entries vanish
while the sampler reads them. It churns for at least CHURN_S (and 60 rounds): a fixed 60 rounds took 0.4-0.8 s
and ended before the measured window (about 1 s of its rounds) was full, so a loaded CI run sampled it only 4 times
at the threads layer's 0.1 s; now the window fills (11 samples quiet)."""
import subprocess
import sys
import threading
import time

import torch

a = torch.randn(256, 256)


def work():
    for _ in range(5):
        torch.tanh(a @ a)


CHURN_S = 2.0
start = time.monotonic()
i = 0
while i < 60 or time.monotonic() - start < CHURN_S:
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if i % 10 == 0:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    i += 1
print("done")
