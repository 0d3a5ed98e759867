"""Planted problem: bfloat16 autocast around an fp32 model, so its weights are cast on every forward.

An MLP (1024 -> 4096 -> 1024, batch 64) with float32 weights runs under
torch.autocast("cpu", dtype=torch.bfloat16): the GEMMs run in bfloat16, and
autocast casts each Linear's float32 weight [4096,1024] / [1024,4096] (and
bias) to bfloat16 on every call. Those casts (aten::copy_ under
aten::_to_copy, called by aten::linear) read 16 MiB and write 8 MiB per
weight per step: about a third of operator time here, as much as the GEMMs.

A good diagnosis must say: the weight casts are autocast's, named as such,
with the fix (convert the weights once: model.to(torch.bfloat16), with the
inputs in bfloat16; or keep the cast out of the loop). It must NOT call them
"aten::linear's own internal copy" with "give it contiguous inputs", and
must NOT suggest trying bfloat16 for a GEMM that already runs in it.

    python examples/autocast_weights.py --steps 40
    diagnose examples/autocast_weights.py -- --steps 40
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM, HIDDEN = 64, 1024, 4096

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, DIM)).eval()
    x = torch.randn(BATCH, DIM)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(args.steps):
            y = model(x)  # autocast casts the fp32 weights to bf16 here, every call
    print(f"output {tuple(y.shape)} {y.dtype}")
