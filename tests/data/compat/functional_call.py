"""torch.func.functional_call: the model run with a dict of parameters (stateless, as torch.func code does)."""
import torch
from mlp import STEPS, build, report
from torch.func import functional_call

model, x = build()
params = {k: v.detach() for k, v in model.named_parameters()}
with torch.no_grad():
    for _ in range(STEPS):
        y = functional_call(model, params, (x,))  # the step
report("functional_call", y)
