"""Planted problem: `torch.set_num_threads(1)` copied from a snippet into a compute-bound training loop.

The line is common in examples written for data-loading workers or for
benchmarks on shared machines; pasted into a training script, it leaves
every CPU but one idle while the matrix products, which torch would spread
over all of them, run on a single thread.

A good diagnosis: `undersubscription` (CPU-bound, one CPU busy, the others
idle, 1 intra-op thread) at the `torch.set_num_threads(1)` line, with a
measured trial at torch.set_num_threads(<usable CPUs>) on the script's own
steps: the finding's stake is that trial's measured gain, not a perfect
scaling ceiling, and when the trial finds no gain the finding says so and
drops to `low`.
"""

import argparse

import torch
import torch.nn as nn

torch.set_num_threads(1)  # the planted mistake: copied from a snippet


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    model, optimizer = build()
    inputs = torch.randn(256, 512)
    labels = torch.randint(0, 10, (256,))
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"loss {loss.item():.4f}")
