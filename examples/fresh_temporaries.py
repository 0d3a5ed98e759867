"""Planted problem: every step's large temporaries are fresh pages from the kernel (page faults).

A normalisation module over 4096 x 4096 fp32 features (64 MiB): each step
makes four 64 MiB temporaries. glibc's malloc serves anything over 32 MiB
(its largest mmap threshold) with a fresh mmap and unmaps it on free, so
every page of every temporary is faulted in and zeroed by the kernel again,
about 16 k minor page faults per temporary. A good diagnosis: the
`page_faults` check with the faults per step and the allocator (glibc), the
operators whose outputs fault in, and a measured trial of an allocator that
keeps the pages (jemalloc with MALLOC_CONF, or glibc's MALLOC_MMAP_THRESHOLD_)
with the exact launch line; the other fix is to reuse the buffers in code.
"""

import argparse

import torch
import torch.nn as nn


class Normalize(nn.Module):
    def forward(self, x):
        centred = x - x.mean(dim=1, keepdim=True)
        scale = torch.rsqrt(centred.pow(2).mean(dim=1, keepdim=True) + 1e-5)
        return torch.tanh(centred * scale)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(0)
    norm = Normalize()
    features = torch.randn(4096, 4096)
    with torch.inference_mode():
        for _ in range(args.steps):
            out = norm(features)
    print("done", float(out[0, 0]))
