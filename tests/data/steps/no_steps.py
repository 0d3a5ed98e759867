"""No optimizer, no module, no mark_step: there is no step to find; the whole run is measured."""
import torch

a = torch.randn(64, 64)
for _ in range(3000):
    b = torch.tanh(a @ a)
print("done", float(b.sum()))
