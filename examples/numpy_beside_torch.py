"""Planted problem: numpy's BLAS pool beside torch's (blas_threads).

Each step turns a batch of raw features into model inputs with a numpy
matrix product (numpy's own OpenBLAS, not torch's MKL), then trains a
small torch MLP on them. numpy's OpenBLAS starts a pool of one thread per
CPU for its first threaded product and keeps those threads spinning for a
while after each call, beside torch's intra-op pool of the same size: two
pools on the same CPUs, with OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS)
unset.

A good diagnosis: the doctor's `blas_threads` check warns (numpy's OpenBLAS
started its pool in the run, its thread variable is unset) and the
`blas_one_thread` trial measures OPENBLAS_NUM_THREADS=1 on the steps; a
finding only if that measured as a win on this machine.

    python examples/numpy_beside_torch.py --steps 60
    diagnose examples/numpy_beside_torch.py
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    projection = rng.standard_normal((512, 256))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        raw = rng.standard_normal((1024, 512))
        features = torch.from_numpy((raw @ projection).astype(np.float32))  # numpy's BLAS
        loss = nn.functional.cross_entropy(model(features), torch.randint(0, 10, (1024,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}")
