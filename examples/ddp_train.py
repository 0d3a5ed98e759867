"""DistributedDataParallel training on CPU (gloo): run it under torchrun.

    diagnose --nproc-per-node 2 examples/ddp_train.py -- --threads all
    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp_train.py

Planted problem (`--threads all`, the default): every rank sets its intra-op
pool to all usable CPUs, as scripts that call torch.set_num_threads(os.cpu_count())
do, so N ranks x all CPUs threads want the machine. torchrun would have set
OMP_NUM_THREADS=1 itself; the script overrides it. A good diagnosis:
`oversubscription` with cause `several_processes` and OMP_NUM_THREADS /
torch.set_num_threads(usable CPUs // ranks) per rank. `--threads fair` sets
exactly that and gets no oversubscription.

`--slow-rank R` makes rank R do extra matmuls every step (a straggler: the
other ranks wait for it in all_reduce); `--fail-rank R` makes rank R raise at
step 2. Run without torchrun it trains alone (a world of one).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", choices=("all", "fair"), default="all",
                        help="intra-op threads per rank: all usable CPUs (the planted mistake) or CPUs // ranks")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--slow-rank", type=int, default=None, help="this rank does extra work every step")
    parser.add_argument("--fail-rank", type=int, default=None, help="this rank raises at step 2")
    args = parser.parse_args()

    if "RANK" not in os.environ:  # plain `python ddp_train.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if args.threads == "all":
        torch.set_num_threads(usable_cpus())  # the planted mistake: every rank takes every CPU
    else:
        torch.set_num_threads(max(1, usable_cpus() // ranks_here))

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                              nn.Linear(1024, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    inputs = torch.randn(args.batch, 512, generator=generator)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)
    extra = torch.randn(768, 768, generator=generator)
    for step in range(args.steps):
        if step == 2 and rank == args.fail_rank:
            raise RuntimeError(f"planted failure on rank {rank}")
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == args.slow_rank:
            for _ in range(6):
                extra = torch.tanh(extra @ extra)  # the straggler's extra work
    world = dist.get_world_size()
    # torch 2.13 + gloo: a gloo thread frees the last all_reduce's work, which holds the
    # backward pass's Python context and needs the GIL; destroy_process_group joins that
    # thread while holding the GIL (a deadlock, more likely on a busy machine). Let the
    # gloo threads finish first: wait for every rank, then release the GIL for a moment.
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps on {world} rank{'s' if world > 1 else ''}, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
