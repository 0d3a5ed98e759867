"""Planted problem: several processes, each with a default (full) torch pool.

Two worker processes each run matmuls with torch's default intra-op thread
count (all usable CPUs), so the machine has 2 x CPUs threads wanting to run.
A good diagnosis: `oversubscription` across processes, recommending
torch.set_num_threads(usable CPUs // processes) in each.
"""

import argparse
import multiprocessing as mp

import torch


def work(steps):
    a = torch.randn(512, 512)
    for _ in range(steps):
        a = torch.tanh(a @ a)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=work, args=(args.steps,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("done")
