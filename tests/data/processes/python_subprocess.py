"""torch work in a subprocess running Python: a fresh interpreter, which the operator pass does not record."""

import subprocess
import sys

import torch

WORK = "import torch; a = torch.randn(200, 200); [a @ a for _ in range(20)]"

if __name__ == "__main__":
    x = torch.randn(100, 100)
    y = (x @ x).sum()
    subprocess.run([sys.executable, "-c", WORK], check=True)
    print("done")
