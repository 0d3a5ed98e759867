"""A small MLP training loop: the healthy control (`make demo` diagnoses examples/python_row_loop.py).

Run it plainly (python examples/mlp.py --steps 30) or under diagnose:
    diagnose examples/mlp.py -- --steps 30
    diagnose examples/mlp.py:step --warmup 3 --iters 20
"""

import argparse

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(512, 1024),
    nn.ReLU(),
    nn.Linear(1024, 1024),
    nn.ReLU(),
    nn.Linear(1024, 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(256, 512)
labels = torch.randint(0, 10, (256,))


def step():
    logits = model(inputs)
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    for _ in range(args.steps):
        loss = step()
    print(f"final loss {loss.item():.4f}")
