"""Planted problem: a weight of subnormal values in a loop with no nn.Module (denormals).

A recurrence at module scope, `h = torch.tanh(h @ w + x)`, whose weight `w`
sits around 1e-39, below fp32's smallest normal number (1.18e-38), as a
decayed or badly scaled weight can. There is no module, no optimizer: the
steps are the loop's iterations. On many x86 CPUs arithmetic on subnormal
operands takes a microcode assist; `torch.set_flush_denormal(True)` treats
them as zero. A good diagnosis: the doctor's `denormals` check naming `w`
(the loop's variables are scanned, as a module's parameters would be) and a
measured `flush_denormal` trial, recommended only where it wins on this
machine (some AMD CPUs handle subnormals at full speed: then "no gain").
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()
torch.manual_seed(0)
w = torch.randn(1024, 1024) * 3e-38 * 0.03  # ~1e-39: subnormal fp32
x = torch.randn(64, 1024)  # a small batch: on a CPU that takes the slow path a step is still ~0.1 s
h = torch.zeros(64, 1024)
for _ in range(args.steps):
    h = torch.tanh(h @ w + x)
print("done", float(h.sum()))
