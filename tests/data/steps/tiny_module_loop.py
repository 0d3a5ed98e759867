"""A tiny module called in a loop at module scope: each call is a 'step' of a few microseconds."""
import torch
import torch.nn as nn

lin = nn.Linear(8, 8)
x = torch.randn(4, 8)
with torch.no_grad():
    for _ in range(5_000):
        x = torch.tanh(lin(x))
print("done")
