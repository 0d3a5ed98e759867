"""DDP on CPU (gloo) where, after training, rank 0 waits in a barrier that rank 1 never reaches (rank 1 waits
for an event nobody sets): a deterministic distributed hang, one stack per rank."""
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for _ in range(10):
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if rank == 0:
    dist.barrier()  # rank 1 never comes
else:
    threading.Event().wait()
