"""torch work mapped over a ProcessPoolExecutor (its workers are forked on Linux with Python 3.11)."""

from concurrent.futures import ProcessPoolExecutor

import torch


def work(i):
    a = torch.randn(200, 200)
    return float((a @ a).sum()) * 0 + i


if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        total = sum(ex.map(work, range(16)))
    print(f"sum {total:.0f}")
