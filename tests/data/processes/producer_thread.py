"""A producer thread prepares batches with numpy while the main thread trains a small MLP on them (a queue between
them): /proc names the producer like its process, as it does OpenMP's workers."""

import queue
import threading

import numpy as np
import torch

STEPS = 150
batches: "queue.Queue[np.ndarray]" = queue.Queue(maxsize=2)


def produce() -> None:
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        x = rng.standard_normal((128, 256)).astype(np.float32)
        for _ in range(20):
            x = np.tanh(x * 1.01 + 0.1)
        batches.put(x)


model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
threading.Thread(target=produce, daemon=True).start()
for _ in range(STEPS):
    loss = model(torch.from_numpy(batches.get())).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
