"""Planted problem: a fresh large temporary on every step (allocation churn).

Each step allocates new 32 MiB buffers (torch.zeros, torch.cat, an
out-of-place chain) instead of reusing one. A good diagnosis:
`memory_churn` with the allocated bytes and rate, and the suggestion to
preallocate and work in place.
"""

import argparse

import torch


def step(x=torch.randn(2048, 4096)):
    acc = torch.zeros(2048, 4096)  # new buffer each call
    for _ in range(6):
        y = x * 0.5 + 1.0  # two temporaries per iteration
        acc = acc + torch.relu(y)  # and another, instead of acc.add_(...)
    return torch.cat([acc, x])  # 64 MiB more


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    for _ in range(args.steps):
        step()
    print("done")
