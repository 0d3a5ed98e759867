"""Planted problem: a .contiguous() after a transpose in the hot loop, ~10% of operator time.

Each step is legitimately heavy: [4096, 2048] x [2048, 512] and [4096, 512]
x [512, 512] matmuls (10.7 GFLOP together). Between them a per-feature normalisation was written
feature-major: `h.t().contiguous()` copies the [4096, 512] activations into
[512, 4096] so that the statistics run along dim=1. The copy (aten::copy_
under aten::contiguous / aten::clone, a strided read of 8 MB) is about a
tenth of the operator time; normalising along dim=0 of `h` needs no copy.

Separately, and outside the hot loop, `make_batch` assembles the input one
row at a time (`batch[i] = row`): an indexed assignment, also an aten::copy_,
but small, run once, and a different pattern (it is not a layout change).

A good diagnosis must say: `copy_overhead` (or the copy as a hot operator)
at the `.contiguous()` line in `step`, ~10% of operator time, with "keep
one layout / normalise along the other dim" as the fix. If it mentions the
`batch[i] = row` line at all, it must name it differently (an indexed
assignment, a per-row copy: build the batch with one torch.stack / index
call) and not give it the transpose's advice or its share.

    python examples/transpose_copy.py --steps 40
    diagnose examples/transpose_copy.py -- --steps 40
"""

import argparse

import torch

BATCH, IN, DIM = 4096, 2048, 512

torch.manual_seed(0)
w_in = torch.randn(IN, DIM) / IN**0.5
w_out = torch.randn(DIM, DIM) / DIM**0.5


def make_batch(rows):
    batch = torch.empty(len(rows), IN)
    for i, row in enumerate(rows):
        batch[i] = row  # indexed assignment: one small copy per row, once
    return batch


def step(x):
    h = torch.relu(x @ w_in)  # [4096, 512]
    h_fm = h.t().contiguous()  # the planted copy: [4096, 512] -> [512, 4096]
    h_fm = (h_fm - h_fm.mean(dim=1, keepdim=True)) * torch.rsqrt(h_fm.var(dim=1, keepdim=True) + 1e-5)
    return h_fm.t() @ w_out  # back to [4096, 512] (a transposed view: no copy)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    x = make_batch([torch.randn(IN) for _ in range(BATCH)])
    with torch.inference_mode():
        for _ in range(args.steps):
            out = step(x)
    print(f"output {tuple(out.shape)}, mean {out.mean().item():.4f}")
