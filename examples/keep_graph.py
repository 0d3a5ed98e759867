"""Planted problem: an evaluation loop keeps every output with its autograd graph.

A 2-layer MLP (Linear(512, 1024), ReLU, Linear(1024, 1024)) scores batches
of 256 with grad mode on, and the loop keeps each output in a list. Each
output carries its graph (grad_fn AddmmBackward0), and that graph keeps the
ReLU's output, saved for a backward that never runs: 256 x 1024 floats for
the output and as many for the saved activation, 2 MiB a step that is never
given back. Over --steps 200 that is 400 MiB.

A good diagnosis must say: memory grows about 2 MiB a step through the
window, at the `outputs.append(out)` line, held by the list and the graphs
of its tensors; keep `out.detach()` (or run under torch.inference_mode()).

    python examples/keep_graph.py --steps 200
    diagnose examples/keep_graph.py
"""

import argparse

import torch
import torch.nn as nn

BATCH, IN, HIDDEN = 256, 512, 1024

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))
x = torch.randn(BATCH, IN)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    outputs = []
    for step in range(args.steps):
        out = model(x)
        outputs.append(out)  # keeps out and, through out.grad_fn, the ReLU output saved for backward
    print(f"kept {len(outputs)} outputs; mean {torch.stack([o.mean() for o in outputs]).mean().item():.4f}")
