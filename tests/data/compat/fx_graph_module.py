"""torch.fx.symbolic_trace: a GraphModule (what FX passes and many quantisation flows produce)."""
import torch
import torch.fx
from mlp import STEPS, build, report

model, x = build()
graph_module = torch.fx.symbolic_trace(model)
with torch.no_grad():
    for _ in range(STEPS):
        y = graph_module(x)  # the step
report("fx", y)
