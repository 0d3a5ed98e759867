"""A script that runs its own cProfile around its loop and prints what it counted."""
import cProfile
import pstats

import torch
from mlp import STEPS, build, report

model, x = build()
profiler = cProfile.Profile()
profiler.enable()
with torch.no_grad():
    for _ in range(STEPS):
        y = model(x)  # the step
profiler.disable()
report("own cProfile", y)
calls = {f[2]: s[1] for f, s in pstats.Stats(profiler).stats.items() if f[2] == "forward" and f[0].endswith("mlp.py")}
print("cProfile saw MLP.forward calls:", calls.get("forward"))
