"""torch.jit.trace (and torch.jit.freeze, as deployment code does): traced TorchScript."""
import torch
from mlp import STEPS, build, report

model, x = build()
with torch.no_grad():
    traced = torch.jit.freeze(torch.jit.trace(model, x))  # torch.jit.trace calls the model once: set-up
    for _ in range(STEPS):
        y = traced(x)  # the step
report("jit.trace", y)
