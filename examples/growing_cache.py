"""Planted problem: a cache of features keyed by something that never repeats.

Features of each batch are memoised in a dict keyed by the batch's step, to
be "reused later", but no key ever comes back: the dict only grows, by one
256 x 1024 float tensor (1 MiB) a step. The loop runs under
torch.inference_mode(), so no graph is involved: a plain container keeps the
memory.

A good diagnosis must say: memory grows about 1 MiB a step through the
window, at the `cache[step] = features` line, held by the dict `cache`;
bound the cache (an LRU of fixed size) or keep only what is needed.

    python examples/growing_cache.py --steps 400
    diagnose examples/growing_cache.py
"""

import argparse

import torch
import torch.nn as nn

BATCH, IN, HIDDEN = 256, 512, 1024

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh())
x = torch.randn(BATCH, IN)
cache = {}

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    with torch.inference_mode():
        for step in range(args.steps):
            features = encoder(x)
            cache[step] = features  # never read again: the dict grows by 1 MiB a step
    print(f"cached {len(cache)} feature tensors")
