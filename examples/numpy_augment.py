"""Planted problem: per-sample numpy augmentation on the main thread, before a small model's training step.

Each step builds a batch by augmenting every image with a numpy FFT low-pass filter, one image at a time, then
trains a small MLP on the batch. Most of the step is numpy's C code, outside torch: no operator table shows it,
and the Python it runs from is a few lines.

A good diagnosis: the step budget's `native` slice names numpy and takes most of the step; an
`outside_torch` finding (medium or higher) at the augmenting function names numpy and suggests moving the
per-sample work into DataLoader workers, or doing it on the whole batch with torch (torch.fft).

    python examples/numpy_augment.py --steps 40
    diagnose examples/numpy_augment.py
"""

import argparse

import numpy as np
import torch


def augment(image: np.ndarray) -> np.ndarray:
    """A low-pass filter in the frequency domain: what an image pipeline might do per sample."""
    spectrum = np.fft.fft2(image)
    rows, cols = image.shape
    mask = np.zeros_like(image)
    mask[: rows // 4, : cols // 4] = 1.0
    return np.real(np.fft.ifft2(spectrum * mask)).astype(np.float32)


def batch(rng: np.random.Generator, size: int = 32, side: int = 128) -> torch.Tensor:
    images = [augment(rng.standard_normal((side, side))) for _ in range(size)]
    return torch.from_numpy(np.stack(images)).reshape(size, -1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = torch.nn.Sequential(torch.nn.Linear(128 * 128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = batch(rng)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}")
