"""Before a fix: a small model whose input is normalised one row at a time.

The planted problem of examples/python_row_loop.py inside a model: each of
the 1000 rows costs a Python iteration and five tiny operators, while the
model itself is two small matmuls. row_loop_after.py is the same model with
the normalisation vectorised. Measure both and compare:

    diagnose -o before examples/fix/row_loop_before.py:step
    diagnose -o after examples/fix/row_loop_after.py:step
    diagnose compare before/report.json after/report.json

`diagnose compare` should say the fix helped, with the wall time ratio
outside the noise, and the python_overhead finding gone.
"""

import torch
from torch import nn

torch.manual_seed(0)
MODEL = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
BATCH = torch.randn(1000, 64)


def normalise(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        out[i] = (row - row.mean()) / (row.std() + 1e-5)
    return out


@torch.inference_mode()
def step():
    return MODEL(normalise(BATCH))


if __name__ == "__main__":
    for _ in range(3):
        step()
    print("done")
