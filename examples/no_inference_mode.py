"""Planted problem: an inference loop that records autograd (no no_grad / inference_mode).

A stack of 8 Linear(256, 256) + ReLU layers serves a batch of 8, 2000
times. The parameters require grad, and the loop runs without
torch.no_grad() or torch.inference_mode(), so every forward builds an
autograd graph nobody will use: each addmm / relu creates a grad_fn node
and keeps its inputs alive for a backward that never comes. At these small
sizes (8 x 256 x 256 per layer) that bookkeeping is a visible share of each
call; torch.inference_mode() removes it (and lets the outputs skip version
counting).

A good diagnosis must say: autograd is recording during inference (outputs
with requires_grad / grad_fn, or AddmmBackward0 / autograd bookkeeping in the
profile, and no backward ever called), at the `model(x)` line in `serve`,
with "wrap the loop in torch.inference_mode()" (or no_grad) as the fix.

    python examples/no_inference_mode.py --steps 2000
    diagnose examples/no_inference_mode.py -- --steps 2000
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM, LAYERS = 8, 256, 8

torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(DIM, DIM), nn.ReLU())]).eval()
x = torch.randn(BATCH, DIM)


def serve(steps):
    total = torch.zeros(BATCH, DIM)
    for _ in range(steps):
        out = model(x)  # records autograd: out.requires_grad is True
        total = total + out
    return total


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    total = serve(args.steps)
    print(f"served {args.steps} batches; mean output {total.mean().item() / args.steps:.4f}")
