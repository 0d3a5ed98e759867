"""Planted problem: a model made of many small element-wise operators, run eagerly.

A stack of 6 gated residual blocks (Linear(128, 128), then GELU, a sigmoid
gate, a multiply, a residual add and LayerNorm) serves a batch of 16 rows
under torch.inference_mode(). Each operator touches 16 x 128 values (8 KiB),
so every call costs about as much in dispatch as in arithmetic: ~40 operator
calls a step, each a few microseconds of work. torch.compile fuses the
element-wise chain of each block into one generated kernel and removes most
of the per-call overhead.

A good diagnosis (with `--what-if auto`) says: torch.compile measured faster
on these steps, with its compile time and the number of steps that repay it,
no graph break; the outputs match the eager run's.

    python examples/pointwise_block.py --steps 3000
    diagnose --what-if compile examples/pointwise_block.py -- --steps 3000
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM, BLOCKS = 16, 128, 6


class GatedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x):
        h = self.proj(x)
        h = nn.functional.gelu(h) * torch.sigmoid(h * 0.5 + 0.1)
        return self.norm(x + h)


def main(steps):
    torch.manual_seed(0)
    model = nn.Sequential(*[GatedBlock() for _ in range(BLOCKS)]).eval()
    x = torch.randn(BATCH, DIM)
    with torch.inference_mode():
        for _ in range(steps):
            out = model(x)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    out = main(args.steps)
    print(f"output {tuple(out.shape)}, mean {out.mean().item():.4f}")
