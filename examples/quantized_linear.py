"""Real-model kind: a dynamically quantised (int8) MLP, as models are often shipped for CPU inference.

torch.ao.quantization.quantize_dynamic replaces each nn.Linear (1024 -> 4096
-> 1024, batch 64) with an int8 DynamicQuantizedLinear: its GEMM runs as
`quantized::linear_dynamic` (the activations quantised on the fly, int8
weights, fp32 output). Building it draws the float weights (aten::uniform_)
and runs each weight through a MinMaxObserver module once: set-up, not the
loop. No problem is planted: this is what a quantised model's diagnosis
looks like.

A good diagnosis must say: the quantised GEMM is the model's core compute
(GEMM advice: threads, batch more rows per call), with its module; the steps
are the model's forward calls (not the observers' set-up calls). It must NOT
call `quantized::linear_dynamic` an element-wise operator ("fuse chains of
them"), must NOT benchmark or blame the weight initialisation, and must NOT
report an allocation rate over a span too short to measure it.

    python examples/quantized_linear.py --steps 40
    diagnose examples/quantized_linear.py -- --steps 40
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM, HIDDEN = 64, 1024, 4096


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, DIM)).eval()
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    model = build()
    x = torch.randn(BATCH, DIM)
    with torch.inference_mode():
        for _ in range(args.steps):
            y = model(x)
    print(f"output {tuple(y.shape)} {y.dtype}")
