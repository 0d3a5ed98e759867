"""nn.DataParallel on CPU (no CUDA device: it calls the wrapped module directly)."""
import torch
import torch.nn as nn

from mlp import STEPS, build, report

model, x = build()
parallel = nn.DataParallel(model)
with torch.no_grad():
    for _ in range(STEPS):
        y = parallel(x)  # the step
report("DataParallel", y)
