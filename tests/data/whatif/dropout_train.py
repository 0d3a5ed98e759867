"""A training step with dropout: the what-if compile variant's outputs must be comparable.

A two-layer MLP with nn.Dropout(0.1), trained with SGD on one fixed batch. Eager and compiled code compute the
same function, but by default inductor draws dropout's masks from its own generator, so the outputs differ by
the masks (BERT training's were 0.18 apart). tests/e2e/test_whatif.py runs `--what-if compile` on it.
"""

import argparse

import torch
import torch.nn as nn


def main(steps: int) -> None:
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    main(parser.parse_args().steps)
