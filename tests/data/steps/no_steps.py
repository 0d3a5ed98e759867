"""No optimizer, no module, no mark_step and no loop statement (a comprehension is not one): there is no step
to find; the whole run is measured."""
import torch

a = torch.randn(64, 64)
b = [torch.tanh(a @ a) for _ in range(3000)][-1]
print("done", float(b.sum()))
