"""Planted problem: predictions gathered into one tensor with torch.cat at every step.

Each step's predictions (256 x 1024 floats, 1 MiB) are appended to a buffer
with `buffer = torch.cat([buffer, out])`: the buffer grows by 1 MiB a step,
and every step copies all of it into a new, bigger tensor (the old one is
freed), so the copying grows too.

A good diagnosis must say: memory grows about 1 MiB a step through the
window, at the `buffer = torch.cat(...)` line, a buffer re-made bigger every
step; preallocate it (torch.empty(total, ...) and write slices) or collect
the pieces in a list and cat once.

    python examples/cat_buffer.py --steps 100
    diagnose examples/cat_buffer.py
"""

import argparse

import torch
import torch.nn as nn

BATCH, IN, HIDDEN = 256, 512, 1024

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.GELU())
x = torch.randn(BATCH, IN)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    buffer = torch.empty(0, HIDDEN)
    with torch.no_grad():
        for step in range(args.steps):
            out = model(x)
            buffer = torch.cat([buffer, out])  # copies the whole buffer, one step bigger, every step
    print(f"gathered predictions {tuple(buffer.shape)}")
