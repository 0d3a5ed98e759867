"""Models module attribution must survive: one with its own forward hooks, a module called outside any
other's forward, a torch.compile'd module, a torch.jit.script'ed module, and functional code with no module."""
import torch
import torch.nn as nn

import diagnose


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.seen = 0
        self.lin.register_forward_hook(self.count)  # the model's own hook, beside diagnose's

    def count(self, module, args, output):
        self.seen += 1

    def forward(self, x):
        return torch.relu(self.lin(x))


hooked = Hooked()
norm = nn.LayerNorm(64)  # called on its own, outside any forward
compiled = torch.compile(nn.Sequential(nn.Linear(64, 64), nn.GELU()))
scripted = torch.jit.script(nn.Sequential(nn.Linear(64, 64), nn.Tanh()))
x = torch.randn(32, 64)
with torch.no_grad():
    for _ in range(60):
        y = norm(hooked(x))
        y = scripted(compiled(y))
        y = torch.sigmoid(y @ y.t()).sum(dim=1)  # functional: no module
        diagnose.mark_step()
print("done", hooked.seen)
