"""torch.multiprocessing.spawn: two processes started with the spawn method, each doing torch work."""

import torch
import torch.multiprocessing as tmp


def work(rank):
    a = torch.randn(200, 200)
    for _ in range(20):
        a @ a


if __name__ == "__main__":
    tmp.spawn(work, nprocs=2)
    print("done")
