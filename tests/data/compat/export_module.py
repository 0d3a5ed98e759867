"""torch.export(...).module(): an exported program run as a module."""
import torch
from mlp import STEPS, build, report

model, x = build()
exported = torch.export.export(model, (x,)).module()
with torch.no_grad():
    for _ in range(STEPS):
        y = exported(x)  # the step
report("export", y)
