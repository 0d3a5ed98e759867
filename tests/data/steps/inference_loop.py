"""Inference with no optimizer: each call of the outermost module (the Sequential) is a step."""
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000)
args = parser.parse_args()
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).eval()
batch = torch.randn(32, 1024)
with torch.no_grad():
    for _ in range(args.steps):
        out = model(batch)
print("done", out.shape)
