"""Planted problem: normalising a batch one row at a time in a Python loop (what `make demo` diagnoses).

Each row costs four tiny operators (mean, std, sub, div) and a Python
iteration; the work itself is microseconds. A good diagnosis:
`python_overhead` (high) at the loop body in normalise_rows, with the
suggestion to vectorise over the batch dimension (x.mean(dim=1, keepdim=True)).
"""

import argparse

import torch


def normalise_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        out[i] = (row - row.mean()) / (row.std() + 1e-5)
    return out


def step(x=torch.randn(2000, 64), w=torch.randn(64, 64)):
    return normalise_rows(x) @ w


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.steps):
        step()
    print("done")
