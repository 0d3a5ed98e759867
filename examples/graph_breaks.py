"""Planted problem: a model whose forward breaks torch.compile's graph.

A small MLP (Linear(256, 256) + ReLU, four times) whose forward inspects its
activations in Python: after the second layer it reads `h.abs().max().item()`
to decide whether to clamp (a data-dependent branch on a Python float), and it
prints a debug line through `print` when a flag is on. `.item()` forces
torch.compile to stop the graph, run the prefix, read the value in Python and
start a new graph: two graphs instead of one, with the break at the `.item()`
line.

A good diagnosis (with `--what-if compile`) names the graph break with
torch._dynamo's reason and the `.item()` line of `forward`, and recommends
compile only if it still wins on these steps.

    python examples/graph_breaks.py --steps 400
    diagnose --what-if compile examples/graph_breaks.py -- --steps 400
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM = 32, 256
DEBUG = False


class InspectingMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        h = x
        for i, layer in enumerate(self.layers):
            h = torch.relu(layer(h))
            if i == 1:
                peak = h.abs().max().item()  # a Python float: torch.compile breaks the graph here
                if peak > 10.0:
                    h = h.clamp(max=10.0)
                if DEBUG:
                    print(f"peak activation {peak:.3f}")
        return h


def main(steps):
    torch.manual_seed(0)
    model = InspectingMLP().eval()
    x = torch.randn(BATCH, DIM)
    with torch.inference_mode():
        for _ in range(steps):
            out = model(x)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    out = main(args.steps)
    print(f"output {tuple(out.shape)}, mean {out.mean().item():.4f}")
