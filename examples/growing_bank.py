"""Planted problem: a loop whose steps slow down, because each searches a bank that grows every step.

Each step embeds a batch of 256 queries with a small MLP, scores them against
every embedding kept so far (`scores = emb @ bank.T`), then adds the batch to
the bank with `torch.cat`. The bank grows by 256 rows a step, so the matrix
product and the copy both grow: step k costs about k times the first, and the
whole run is quadratic in its length.

A good diagnosis must say: step time rises steadily through the window
(`step_drift`), growing at the `scores = ...` and `bank = torch.cat(...)`
lines; their inputs grow by 256 KiB a step (`input_growth`), projected to the
script's last step; bound the bank (a fixed-size window, a preallocated ring
buffer) or build an index once.

    python examples/growing_bank.py --steps 200
    diagnose examples/growing_bank.py
"""

import argparse

import torch
from torch import nn

BATCH, DIM = 256, 256

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(DIM, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
queries = torch.randn(BATCH, DIM)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    bank = torch.empty(0, DIM)
    with torch.no_grad():
        for step in range(args.steps):
            emb = encoder(queries + 0.01 * step)
            scores = emb @ bank.T  # every row kept so far: one step more each step
            best = scores.max(dim=1).values if bank.shape[0] else None
            bank = torch.cat([bank, emb])  # the bank grows by BATCH rows a step
    print(f"bank {tuple(bank.shape)}")
