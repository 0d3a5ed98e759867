"""Planted problem: a torch.compile'd model, where compiling is a large share of a short run.

A small MLP (4 x Linear(512, 512) + GELU, then LayerNorm) compiled with
torch.compile (default backend, inductor: it writes and builds C++ kernels
with g++) runs 200 inference steps on a batch of 64. The first call traces
the model (dynamo), lowers it (inductor: Scheduler.codegen) and compiles the
kernels (async_compile.wait): about 1.6 s on this machine (the same with
inductor's on-disk cache, /tmp/torchinductor_<user>, cold or warm), against
~0.4 s for the 200 steps (~1.8 ms each, no faster than eager at this size).

A good diagnosis must say: the steady state (the compiled graph's mm /
addmm calls and the fused kernels) and, separately, the one-off compile time
as compile time (dynamo / inductor, at the first call's line in `main`),
not compile internals (`async_compile.wait (dynamo_timed)`,
`Scheduler.codegen`) as hot operators with no source line. The remedy for
compile time: compile only where the steps are many enough to repay it (here
eager is as fast), and warm up outside the region being measured.

    python examples/compiled_model.py --steps 200
    diagnose examples/compiled_model.py -- --steps 200
"""

import argparse

import torch
import torch.nn as nn

BATCH, DIM, LAYERS = 64, 512, 4


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x):
        for layer in self.layers:
            x = x + nn.functional.gelu(layer(x))
        return self.norm(x)


def main(steps):
    torch.manual_seed(0)
    model = torch.compile(MLP().eval())
    x = torch.randn(BATCH, DIM)
    with torch.inference_mode():
        for _ in range(steps):
            out = model(x)  # the first call compiles
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    out = main(args.steps)
    print(f"output {tuple(out.shape)}, mean {out.mean().item():.4f}")
