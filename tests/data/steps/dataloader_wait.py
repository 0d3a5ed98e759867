"""Training fed by a DataLoader without workers whose samples are slow to make: the steps wait for data."""
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 64 * 40

    def __getitem__(self, i):
        time.sleep(0.0004)  # decoding, augmentation...
        return torch.randn(128), i % 10


model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Slow(), batch_size=64):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
