"""A slow, RNG-heavy setup (a large embedding table initialised twice) before a modest training loop."""
import torch
import torch.nn as nn

torch.manual_seed(0)
table = nn.Embedding(400_000, 128)  # setup: ~51 M random numbers, twice
nn.init.normal_(table.weight, std=0.02)
table.weight.requires_grad_(False)  # a frozen, pretrained-style table
head = nn.Linear(128, 64)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
ids = torch.randint(0, 400_000, (256,))
for _ in range(60):
    loss = head(table(ids)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
