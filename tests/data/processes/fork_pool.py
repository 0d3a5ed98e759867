"""A script that maps torch work over a multiprocessing Pool (issue 33): `fork_pool.py [METHOD] [with|close] [N]`,
N workers (4 by default).

`with` (the default) closes the pool by Pool.__exit__, which terminates the workers with SIGTERM; `close` ends
them by close() and join(), each worker leaving through os._exit. The plain run prints one line and exits 0."""

import multiprocessing as mp
import sys

import torch


def work(i):
    a = torch.randn(200, 200)
    return float((a @ a).sum()) * 0 + i


if __name__ == "__main__":
    method = sys.argv[1] if len(sys.argv) > 1 else "fork"
    closing = sys.argv[2] if len(sys.argv) > 2 else "with"
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    if closing == "with":
        with mp.get_context(method).Pool(workers) as pool:
            total = sum(pool.map(work, range(32)))
    else:
        pool = mp.get_context(method).Pool(workers)
        total = sum(pool.map(work, range(32)))
        pool.close()
        pool.join()
    print(f"sum {total:.0f}")
