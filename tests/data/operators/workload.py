"""A small training step plus tiny Python-loop ops, for tests/unit/test_operators_kineto.py."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(8, 16)
labels = torch.randint(0, 4, (8,))


def tiny_loop(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        out[i] = (row - row.mean()) / (row.std() + 1e-5)
    return out


def step():
    loss = nn.functional.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    tiny_loop(inputs)
    # record_function ranges; their enter/exit calls pass through the source
    # mode, whose annotations then overlap the ranges partially
    with torch.profiler.record_function("outer"):
        with torch.profiler.record_function("inner"):
            torch.ones(3).add_(1)
        torch.zeros(2)
    return loss
