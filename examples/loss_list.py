"""Planted problem: a validation loop keeps its loss tensors, and with them every graph.

The loss of each validation batch goes into a list, for a mean at the end,
with grad mode on and no backward. Each loss tensor holds its autograd
graph, and the graph the activations it saved: the ReLU output of the
hidden layer (256 x 1024 floats) and cross-entropy's log-softmax (256 x 16
floats), about 1.02 MiB a step. `losses.append(loss.item())` keeps a float.

A good diagnosis must say: memory grows about 1 MiB a step through the
window, at the `losses.append(loss)` line, held through autograd graphs;
`.item()` (or torch.inference_mode() around the loop).

    python examples/loss_list.py --steps 400
    diagnose examples/loss_list.py
"""

import argparse

import torch
import torch.nn as nn

BATCH, IN, HIDDEN, CLASSES = 256, 512, 1024, 16

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
inputs = torch.randn(BATCH, IN)
labels = torch.randint(0, CLASSES, (BATCH,))

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    losses = []
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        losses.append(loss)  # the tensor, with its graph: loss.item() keeps a float
    print(f"validation loss {torch.stack(losses).mean().item():.4f} over {len(losses)} batches")
