"""DDP on CPU (gloo) that destroys its process group right after the last backward: with torch 2.13 the
process group's destructor can deadlock (it holds the GIL while a gloo thread frees the last all-reduce's
autograd context). examples/ddp_train.py calls dist.barrier() first; this script does not."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for _ in range(args.steps):
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()  # no barrier first
