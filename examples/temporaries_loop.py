"""Planted problem: fresh 64 MiB temporaries every iteration of a loop at module scope (page faults).

Notebook-style code with no nn.Module and no optimizer: each iteration
normalises 4096 x 4096 fp32 features (64 MiB) through four 64 MiB
temporaries. glibc's malloc serves anything over 32 MiB (its largest mmap
threshold) with a fresh mmap and unmaps it on free, so every page of every
temporary is faulted in and zeroed by the kernel again, every iteration. The
steps are the loop's iterations. A good diagnosis: the doctor's `page_faults`
check with the faults per step and the allocator (glibc), and a measured
trial of an allocator that keeps the pages (jemalloc with MALLOC_CONF, or
glibc's MALLOC_MMAP_THRESHOLD_) with the exact launch line; the other fix is
to reuse the buffers in code (out=, in-place operators).
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()
torch.manual_seed(0)
features = torch.randn(4096, 4096)
for _ in range(args.steps):
    centred = features - features.mean(dim=1, keepdim=True)
    scale = torch.rsqrt(centred.pow(2).mean(dim=1, keepdim=True) + 1e-5)
    out = torch.tanh(centred * scale)
print("done", float(out[0, 0]))
