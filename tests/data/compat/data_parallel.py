"""nn.DataParallel on CPU (no CUDA device: it calls the wrapped module directly)."""
import torch
from mlp import STEPS, build, report
from torch import nn

model, x = build()
parallel = nn.DataParallel(model)
with torch.no_grad():
    for _ in range(STEPS):
        y = parallel(x)  # the step
report("DataParallel", y)
