"""Planted control: a hot loop at module scope (no function), and no Python problem.

Notebook-style code: the loop that does the work sits at the top level of
the script, not in a function. Each iteration is one 1024 x 1024 x 1024
matmul (2.1 GFLOP, ~15-20 ms at this machine's GEMM peak) and a tanh over
its output: two Python lines per ~20 ms of operator time, so Python is a
rounding error. The profilers see the loop's lines as `<module>` code.

A good diagnosis must say: aten::mm is the hot operator (near the GEMM
peak on the roofline), at the `c = a @ b` line, nothing above `low`.
It must NOT say: python_overhead at medium or high (the time spent "in
<module>" is the matmuls' time, not Python's).

    python examples/module_scope_loop.py
    diagnose examples/module_scope_loop.py
"""

import torch

N, STEPS = 1024, 120

torch.manual_seed(0)
a = torch.randn(N, N)
b = torch.randn(N, N) / N**0.5  # keeps tanh out of saturation
for _ in range(STEPS):
    c = a @ b
    a = torch.tanh(c)
print(f"after {STEPS} steps: mean {a.mean().item():.4f}")
