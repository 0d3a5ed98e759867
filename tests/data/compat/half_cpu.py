"""model.half() on CPU: float16 GEMMs."""
import torch
from mlp import STEPS, build, report

model, x = build()
model, x = model.half(), x.half()
with torch.inference_mode():
    for _ in range(STEPS):
        y = model(x)  # the step
report("half", y)
