"""A script that maps torch work over a fork Pool and closes it with `with` (Pool.__exit__ terminates the workers
with SIGTERM), as in issue 33: the plain run prints one line and exits 0."""

import multiprocessing as mp
import sys

import torch


def work(i):
    a = torch.randn(200, 200)
    return float((a @ a).sum()) * 0 + i


if __name__ == "__main__":
    method = sys.argv[1] if len(sys.argv) > 1 else "fork"
    with mp.get_context(method).Pool(4) as pool:
        total = sum(pool.map(work, range(32)))
    print(f"sum {total:.0f}")
