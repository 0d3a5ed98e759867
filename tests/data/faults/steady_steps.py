"""A steady inference loop long enough for every layer: the well-behaved target the fault tests disturb."""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)).eval()
x = torch.randn(64, 512)
with torch.no_grad():
    for _ in range(400):
        y = model(x)
print("done")
