"""Attention written out by hand: bmm, scale, softmax, bmm at a long sequence.

The two bmm calls are compute-bound and run near the machine's GEMM peak;
the division and softmax in between are memory-bound: each reads and writes
the whole (batch*heads, seq, seq) score tensor, 32 MiB at these sizes. The
efficiency layer shows both on the roofline; F.scaled_dot_product_attention
fuses the middle away.

    python examples/attention.py --steps 10
    diagnose examples/attention.py -- --steps 10
    diagnose examples/attention.py:step --warmup 2 --iters 10
"""

import argparse
import math

import torch

torch.manual_seed(0)
BATCH_HEADS, SEQ, HEAD_DIM = 32, 512, 64
q = torch.randn(BATCH_HEADS, SEQ, HEAD_DIM)
k = torch.randn(BATCH_HEADS, SEQ, HEAD_DIM)
v = torch.randn(BATCH_HEADS, SEQ, HEAD_DIM)


def attention(q, k, v):
    scores = torch.bmm(q, k.transpose(1, 2))
    scores = scores / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores, dim=-1)
    return torch.bmm(probs, v)


def step():
    with torch.inference_mode():
        return attention(q, k, v)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    for _ in range(args.steps):
        out = step()
    print(f"output {tuple(out.shape)}, mean {out.mean().item():.4f}")
