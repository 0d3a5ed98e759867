"""A planted Python-overhead problem: normalising a matrix one row at a time."""

import torch


def normalise_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        out[i] = (row - row.mean()) / (row.std() + 1e-5)
    return out


def main(rows=1000):
    x = torch.randn(rows, 64)
    w = torch.randn(64, 64)
    for _ in range(2):
        y = normalise_rows(x) @ w
    print(f"checksum {float(y.sum()):.3f}")


if __name__ == "__main__":
    main()
