"""Planted problem: a GEMV-bound decoder, one token at a time for 2 sequences.

A small decoder generates tokens greedily, one step per token, for a batch
of 2 sequences: embed the last token, two residual tanh(h @ W) blocks
(256 x 256), then the output projection to an 8000-token vocabulary,
stored like nn.Linear's weight ([8000, 256]): aten::mm [2,256] x [256,8000].
That mm reads the whole 8.2 MB fp32 weight to make 2 x 8000 logits: 2 FLOP
per 4 bytes of weight per row, ~1 FLOP/byte, so it is bound by memory
bandwidth (the weight fits this machine's 32 MB L3 but not its 1 MB L2),
and it is ~80% of the operator time. Measured here: 0.6-0.9 ms per call
plainly (9-14 GB/s of weight, 9-14 GFLOP/s against a 129 GFLOP/s GEMM peak
and 34 GB/s of stream bandwidth), ~1 ms per generated token. 1 thread is
about as fast as 2 (0.71 vs 0.83 ms in diagnose's micro-benchmark), so a
thread count is no fix; the same weight stored [256, 8000] (h @ W, no
transpose) reads at ~18 GB/s. More rows per call amortise the weight: 16
rows cost ~2.7x the time of 2.

A good diagnosis must say: the output projection's aten::mm (at the
`logits = ...` line) is memory-bound: its GB/s (weight bytes read per call
over the time per call) against the machine's bandwidth, its GFLOP/s far
below the GEMM peak; the remedy is more rows per call (decode more sequences
at once: the weight is read once for all rows) or smaller weights (bfloat16
/ int8, a smaller vocabulary). It must NOT call it a "sequential kernel"
(sequential_operator) or suggest a thread-count change as the fix.

    python examples/gemv_decoder.py --tokens 3000
    diagnose examples/gemv_decoder.py -- --tokens 3000
"""

import argparse

import torch

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
