"""benchmarks/compare_drift.py's workload: a loop of matmul steps, `--work W` times the work per step.

    python benchmarks/drift_target.py [--work 1.15] [--steps 40]

Each step runs round(20 * W) 256x256 matmuls (plus an add), so --work 1.15 is 15% more of the same work.
"""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--work", type=float, default=1.0)
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()
torch.manual_seed(0)
a = torch.randn(256, 256)
b = torch.randn(256, 256)
model = torch.nn.Identity()
n = round(20 * args.work)
for _ in range(args.steps):
    x = model(a)  # the outermost module: one call per step
    for _ in range(n):
        x = torch.mm(x, b) * 0.01 + a
