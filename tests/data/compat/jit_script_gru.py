"""torch.jit.script of a recurrent model under the call-graph pass: the scripted forward is C++ that nn.Module's
call frame calls, which cProfile reports no call for (its time is that frame's own, not Python's)."""
import torch
from mlp import STEPS, report
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5000, 128)
        self.gru = nn.GRU(128, 256, batch_first=True, bidirectional=True)
        self.out = nn.Linear(512, 40)

    def forward(self, x):
        h, _ = self.gru(self.emb(x))
        return self.out(h)


torch.manual_seed(0)
model = torch.jit.script(Tagger().eval())
x = torch.randint(1, 5000, (32, 80))
with torch.no_grad():
    for _ in range(STEPS):
        y = model(x)  # the step
report("jit.script GRU", y)
