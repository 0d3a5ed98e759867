"""A model with its own forward pre-hooks and hooks (on the root and a submodule) beside diagnose's."""
import torch
from mlp import STEPS, build, report

model, x = build()
seen = {"pre": 0, "post": 0, "fc1": 0}
model.register_forward_pre_hook(lambda m, args: seen.__setitem__("pre", seen["pre"] + 1))
model.register_forward_hook(lambda m, args, out: seen.__setitem__("post", seen["post"] + 1))
model.fc1.register_forward_hook(lambda m, args, out: seen.__setitem__("fc1", seen["fc1"] + 1))
with torch.no_grad():
    for _ in range(STEPS):
        y = model(x)  # the step
report("own hooks", y)
print("hooks fired", seen)
