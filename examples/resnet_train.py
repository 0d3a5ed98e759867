"""Real-model gallery: a small ResNet training loop (transformers), random weights.

ResNetForImageClassification from a config (embedding 32, hidden sizes
32/64/128/256, one bottleneck block per stage, 10 labels), so nothing is
downloaded, trained with SGD (momentum) on random NCHW images, batch 16 of
3 x 128 x 128 (~80 ms a step here; at batch 8 of 64 x 64 the steps are so
small that Python and per-operator overhead are most of the time). The time
is the convolutions forward and backward (aten::mkldnn_convolution /
convolution_backward), then batch norm, ReLU, max pooling and the
optimizer's per-parameter updates.

A good diagnosis: the convolutions as the hot operators (forward and
backward), nothing above `medium`; the inputs and weights are NCHW
(contiguous), so `torch.channels_last` (model.to(memory_format=...) and
the inputs) is a legitimate suggestion for oneDNN convolutions; no
python_overhead; the model construction is setup, not a finding. Under
glibc malloc its activations fault in fresh pages every step (8-27% of
it at 1 µs a fault): a caching allocator is the one `high` finding where
the doctor's trial measures a win.

    python examples/resnet_train.py --steps 30
    diagnose examples/resnet_train.py -- --steps 30
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: the model is built from a config

import torch
from transformers import ResNetConfig, ResNetForImageClassification

BATCH, SIZE, LABELS = 16, 128, 10

torch.manual_seed(0)
config = ResNetConfig(
    num_channels=3,
    embedding_size=32,
    hidden_sizes=[32, 64, 128, 256],
    depths=[1, 1, 1, 1],
    layer_type="bottleneck",
    num_labels=LABELS,
)
model = ResNetForImageClassification(config).train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images = torch.randn(BATCH, 3, SIZE, SIZE)  # NCHW: the default, contiguous layout
labels = torch.randint(0, LABELS, (BATCH,))


def step():
    loss = model(pixel_values=images, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    for _ in range(args.steps):
        loss = step()
    print(f"final loss {loss.item():.4f}")
