"""Planted problem: DataLoader workers doing numpy math beside a full torch pool.

Each worker runs numpy matrix products (numpy's BLAS keeps its own full
thread pool in the worker) while the main process trains with every usable
CPU. A good diagnosis: `oversubscription` from DataLoader workers plus the
main pool, with the worker threads in evidence.
"""

import argparse

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __len__(self):  # enough batches that the workers keep computing through diagnose's window of steps
        return 256

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        x = rng.standard_normal((384, 384)).astype(np.float32)
        for _ in range(4):  # "augmentation": numpy work in the worker
            x = np.tanh(x @ x.T / 384)
        return torch.from_numpy(x[:32, :256].copy()), i % 10


def main(epochs):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(32 * 256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Augmented(), batch_size=8, num_workers=2)
    for _ in range(epochs):
        for x, y in loader:
            for _ in range(6):  # several updates per batch keep the main pool busy
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    print("done")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    main(parser.parse_args().epochs)
