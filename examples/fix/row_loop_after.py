"""After the fix: row_loop_before.py with the normalisation vectorised.

One mean and one std over dim=1 for the whole batch instead of a Python
loop over rows: the same numbers (row_loop_before.normalise gives the same
result to float rounding), a handful of operators per step instead of
thousands. See row_loop_before.py for the commands that compare the two.
"""

import torch
from torch import nn

torch.manual_seed(0)
MODEL = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
BATCH = torch.randn(1000, 64)


def normalise(x):
    return (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-5)


@torch.inference_mode()
def step():
    return MODEL(normalise(BATCH))


if __name__ == "__main__":
    for _ in range(3):
        step()
    print("done")
