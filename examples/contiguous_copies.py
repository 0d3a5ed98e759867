"""Planted problem: .contiguous() after every transpose, inside the hot loop.

A layer keeps its activations as [batch, features] but a helper transposes
them to [features, batch] and back, copying each time. A good diagnosis:
`copy_overhead` for aten::copy_ / contiguous at the helper's lines, with the
suggestion to keep one layout.
"""

import argparse

import torch


def to_feature_major(x):
    return x.t().contiguous()  # copy 1: [B, F] -> [F, B]


def to_batch_major(x):
    return x.t().contiguous()  # copy 2: back again


def step(x=torch.randn(2048, 2048), scale=torch.randn(2048, 1)):
    for _ in range(4):
        h = to_feature_major(x)
        h = h * scale  # a cheap per-feature scaling that did not need the transpose
        x = to_batch_major(h)
    return x


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    for _ in range(args.steps):
        step()
    print("done")
