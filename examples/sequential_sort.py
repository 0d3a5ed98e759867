"""Planted problem: a large 1-D sort, which torch runs on one thread.

Each step ranks 4 million scores with a full torch.sort to keep the top
ones. A good diagnosis: `sequential_operator` for aten::sort at this line,
with its 1-thread and all-threads micro-benchmark times (about the same),
and the suggestion to use torch.topk.
"""

import argparse

import torch


def step(scores=torch.randn(4_000_000)):
    ranked, order = torch.sort(scores, descending=True)  # only the top 100 are used
    return order[:100]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    for _ in range(args.steps):
        step()
    print("done")
