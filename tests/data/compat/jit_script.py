"""torch.jit.script: a TorchScript module, which refuses per-module hooks."""
import torch
from mlp import STEPS, build, report

model, x = build()
scripted = torch.jit.script(model)
with torch.no_grad():
    for _ in range(STEPS):
        y = scripted(x)  # the step
report("jit.script", y)
