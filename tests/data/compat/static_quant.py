"""Static int8 quantisation (eager mode: QuantStub, observers calibrated, convert): quantized::linear."""
import torch
from mlp import STEPS, build, report
from torch import nn
from torch.ao.quantization import (
    DeQuantStub,
    QuantStub,
    convert,
    get_default_qconfig,
    prepare,
)


class Quantisable(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.quant, self.mlp, self.dequant = QuantStub(), mlp, DeQuantStub()

    def forward(self, x):
        return self.dequant(self.mlp(self.quant(x)))


mlp, x = build()
model = Quantisable(mlp).eval()
model.qconfig = get_default_qconfig("x86")
prepared = prepare(model)
prepared(x)  # calibration: the observers see one batch
quantised = convert(prepared)
with torch.inference_mode():
    for _ in range(STEPS):
        y = quantised(x)  # the step
report("static int8", y)
