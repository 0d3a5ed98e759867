"""torch.jit.load: a model shipped as a TorchScript file (`python jit_load.py model.pt`; --save writes one)."""
import sys

import torch
from mlp import STEPS, build, report

if sys.argv[1:2] == ["--save"]:
    model, _ = build()
    torch.jit.save(torch.jit.script(model), sys.argv[2])
    raise SystemExit(0)
loaded = torch.jit.load(sys.argv[1])
_, x = build()
with torch.no_grad():
    for _ in range(STEPS):
        y = loaded(x)  # the step
report("jit.load", y)
