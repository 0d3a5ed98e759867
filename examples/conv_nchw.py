"""Planted problem: a convolutional network served on NCHW (channels-first) tensors.

A small CNN (four 3x3 convolutions of 64-128 channels with BatchNorm and
ReLU, two max-pools, then a linear head) classifies a batch of 16 images of
64x64 pixels under torch.inference_mode(). The model and its inputs are in
torch's default layout, NCHW. oneDNN's CPU convolutions work in a blocked or
channels-last (NHWC) layout, so an NCHW convolution reorders its input and
output around every call; with `model.to(memory_format=torch.channels_last)`
and channels-last inputs the reorders go away.

A good diagnosis (with `--what-if auto`) says: channels_last applies (2-D
convolutions on 4-D NCHW inputs), measured on these steps with its speedup,
95% interval and an output check; recommended only if it wins here.

    python examples/conv_nchw.py --steps 60
    diagnose --what-if auto examples/conv_nchw.py -- --steps 60
"""

import argparse

import torch
import torch.nn as nn

BATCH, SIZE = 16, 64


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(block(3, 64), block(64, 64), nn.MaxPool2d(2),
                                      block(64, 128), block(128, 128), nn.MaxPool2d(2))
        self.head = nn.Linear(128, classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


def main(steps):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    images = torch.randn(BATCH, 3, SIZE, SIZE)
    with torch.inference_mode():
        for _ in range(steps):
            logits = model(images)
    return logits


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    out = main(args.steps)
    print(f"logits {tuple(out.shape)}, mean {out.mean().item():.4f}")
