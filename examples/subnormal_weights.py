"""Planted problem: weights decayed into the subnormal range (denormals).

An MLP whose weights were scaled down to about 1e-39, below fp32's smallest
normal number (1.18e-38), as long weight decay or a bad initialisation
scale can leave them. On many x86 CPUs arithmetic on subnormal operands
takes a microcode assist; `torch.set_flush_denormal(True)` treats them as
zero. A good diagnosis: the `denormals` check naming the tensors and their
subnormal share, and a measured trial of flush_denormal: recommended only
where it wins on this machine (1.5x was measured on an AVX-512 Intel-class
CPU; some AMD CPUs handle subnormals at full speed, and then the trial says
"no gain" and nothing is recommended).
"""

import argparse

import torch
import torch.nn as nn

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh())
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3e-38)  # ~0.03 * 3e-38: subnormal
    x = torch.randn(64, 1024)  # a small batch: on a CPU that takes the slow path a step is still ~0.1 s
    with torch.inference_mode():
        for _ in range(args.steps):
            y = model(x)
    print("done", float(y.sum()))
