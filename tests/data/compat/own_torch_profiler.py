"""A script that runs its own torch.profiler around its loop and prints what it recorded."""
import torch
from mlp import STEPS, build, report
from torch.profiler import ProfilerActivity, profile

model, x = build()
with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(STEPS):
        y = model(x)  # the step
report("own torch.profiler", y)
names = {e.name for e in prof.events()}
print("profiled addmm:", "aten::addmm" in names, "calls:", sum(e.count for e in prof.key_averages() if e.key == "aten::addmm"))
