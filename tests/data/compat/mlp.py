"""The model every row starts from (imported by the row scripts, never run itself)."""
import torch
from torch import nn

STEPS, BATCH, DIM, HIDDEN = 6, 16, 128, 256


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def build():
    torch.manual_seed(0)
    return MLP().eval(), torch.randn(BATCH, DIM)


def report(kind, y):
    print(f"{kind}: output {tuple(y.shape)} {str(y.dtype).replace('torch.', '')}")
