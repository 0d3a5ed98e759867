"""Planted control: a functional model (no nn.Module, no torch.optim), trained by hand.

The weights are plain tensors with requires_grad, the forward is a function,
and the update is written out (`w -= lr * w.grad`): nothing diagnose can hook
marks a step (no optimizer.step(), no module call). The loop's iterations are
still the steps. A good diagnosis: the steps are the iterations of the loop at
`for step in range(args.steps):` (step detector `loop`), the window's
operator calls are exactly so many per step (2 forward matmuls a step), the
matmuls at the forward's line as what costs; nothing above `low`.

    python examples/functional_mlp.py
    diagnose examples/functional_mlp.py
"""

import argparse

import torch
import torch.nn.functional as F


def forward(params, x):
    w1, b1, w2, b2 = params
    return F.relu(x @ w1 + b1) @ w2 + b2


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    params = [torch.randn(512, 1024) * 0.03, torch.zeros(1024), torch.randn(1024, 10) * 0.03, torch.zeros(10)]
    for p in params:
        p.requires_grad_()
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    for step in range(args.steps):
        loss = F.cross_entropy(forward(params, x), y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 0.05 * p.grad
                p.grad = None
    print("done", round(loss.item(), 4))
