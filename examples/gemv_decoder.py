"""Planted problem: a GEMV-bound decoder, one token at a time for 2 sequences.

A small decoder generates tokens greedily, one step per token, for a batch
of 2 sequences: embed the last token, two residual tanh(Linear(256, 256))
blocks, then the output projection to an 8000-token vocabulary:
aten::mm [2,256] x [256,8000]. That mm reads the whole 8.2 MB fp32 weight
(more than this machine's L2 cache) to make 2 x 8000 logits: 2 FLOP per 4
bytes of weight, an arithmetic intensity of ~1 FLOP/byte, so it is bound by
memory bandwidth, and it is most of the operator time.

A good diagnosis must say: the output projection's aten::mm (at the
`logits = ...` line) is memory-bound: its GB/s (weight bytes read per call
over the time per call) near the machine's memory bandwidth, its GFLOP/s far
below the GEMM peak; the remedy is more rows per call (decode more sequences
at once: the weight is read once for all rows) or smaller weights (bfloat16
/ int8, a smaller vocabulary). It must NOT call it a "sequential kernel" or
suggest a thread-count change as the fix: the kernel is parallel, it waits
on memory.

    python examples/gemv_decoder.py --tokens 3000
    diagnose examples/gemv_decoder.py -- --tokens 3000
"""

import argparse

import torch
import torch.nn.functional as F

VOCAB, DIM, BATCH, LAYERS = 8000, 256, 2, 2

torch.manual_seed(0)
embedding = torch.randn(VOCAB, DIM) * 0.1
blocks = [torch.randn(DIM, DIM) / DIM**0.5 for _ in range(LAYERS)]
output_weight = torch.randn(VOCAB, DIM) / DIM**0.5  # [8000, 256]: 8.2 MB of fp32


def decode_step(tokens):
    h = embedding[tokens]  # [2, 256]
    for w in blocks:
        h = h + torch.tanh(h @ w)
    logits = h @ output_weight.t()  # aten::mm [2,256] x [256,8000]: the GEMV
    return logits.argmax(dim=-1)


def generate(tokens, n):
    with torch.inference_mode():
        for _ in range(n):
            tokens = decode_step(tokens)
    return tokens


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=3000)
    args = parser.parse_args()
    last = generate(torch.zeros(BATCH, dtype=torch.long), args.tokens)
    print(f"generated {args.tokens} tokens for {BATCH} sequences; last {last.tolist()}")
