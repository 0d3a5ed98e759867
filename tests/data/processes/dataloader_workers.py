"""A training loop fed by a DataLoader with two worker processes that do torch work per sample:
`dataloader_workers.py [persistent]` keeps the workers between epochs (persistent_workers=True)."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        a = torch.randn(64, 64)
        return (a @ a)[0], torch.tensor(i % 4)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(), batch_size=8, num_workers=2, persistent_workers="persistent" in sys.argv[1:])
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("done")
