"""Planted problem: 8 intra-op threads on a machine with fewer usable CPUs.

A good diagnosis: `oversubscription` (runnable threads well above the usable
CPUs, a large run-queue wait share); `diagnose threads --sweep` recommends
torch.set_num_threads(<= usable CPUs).
"""

import argparse

import torch

torch.set_num_threads(8)  # the planted mistake: hard-coded for a bigger machine


def step(a=torch.randn(512, 512), b=torch.randn(512, 512)):
    for _ in range(8):
        a = torch.tanh(a @ b)
    return a


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    for _ in range(args.steps):
        step()
    print("done")
