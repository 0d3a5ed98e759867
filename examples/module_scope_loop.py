"""Planted control: a hot loop at module scope (no function), and no Python problem.

Notebook-style code: the loop that does the work sits at the top level of
the script, not in a function. Each iteration is one [512, 4096] x
[4096, 4096] matmul (17 GFLOP, ~130-150 ms at this machine's GEMM peak) and
a ReLU over its [512, 4096] output (a millisecond or two; b is He-scaled so
the values neither grow nor decay): two Python lines per ~150 ms of operator
time, so Python is a rounding error. The profilers see the loop's lines as
`<module>` code. (The matmul is large so that the element-wise op after it
stays a small share: at 1024 x 1024 x 1024 the operator pass measured the
ReLU at 13-26% of operator time, a tanh at ~28%.)

A good diagnosis must say: aten::mm is the hot operator (near the GEMM
peak on the roofline), at the `c = a @ b` line, nothing above `low`.
It must NOT say: python_overhead at medium or high (the time spent "in
<module>" is the matmuls' time, not Python's).

    python examples/module_scope_loop.py
    diagnose examples/module_scope_loop.py
"""

import torch

ROWS, N, STEPS = 512, 4096, 20

torch.manual_seed(0)
a = torch.randn(ROWS, N)
b = torch.randn(N, N) * (2 / N) ** 0.5  # He scaling: relu(a @ b) keeps a's scale
for _ in range(STEPS):
    c = a @ b
    a = torch.relu(c)
print(f"after {STEPS} steps: mean {a.mean().item():.4f}")
