"""A model converted once with .to(torch.bfloat16): bf16 GEMMs, no casts in the loop."""
import torch
from mlp import STEPS, build, report

model, x = build()
model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
with torch.inference_mode():
    for _ in range(STEPS):
        y = model(x)  # the step
report("bf16", y)
