"""Planted problem: a model trained in float64 because its features come from numpy.

The features are a numpy array (float64, numpy's default), so `torch.from_numpy`
gives float64 tensors, and the model is cast with `.double()` to match. Every
matrix product then runs in float64: half the SIMD lanes of float32 and twice
the bytes, for precision a classifier does not need.

A good diagnosis must say: float64 operators take nearly all the operator
time, the float64 comes from the `.double()` line (and the numpy features),
and float32 (`model.float()`, `torch.from_numpy(features).float()`) is about
twice as fast with matching outputs (`--what-if auto` measures it).

    python examples/float64_train.py --steps 30
    diagnose --what-if auto examples/float64_train.py
"""

import argparse

import numpy as np
import torch
from torch import nn

rng = np.random.default_rng(0)
features = rng.standard_normal((128, 256))  # float64, numpy's default
labels = torch.from_numpy(rng.integers(0, 10, 128))

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
model = model.double()  # to match the float64 features
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.from_numpy(features)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"final loss {loss.item():.4f}")
