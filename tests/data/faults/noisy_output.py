"""Prints 100 MB, and bytes that are not UTF-8, while it computes."""
import sys

import torch

a = torch.randn(128, 128)
line = "x" * 1023 + "\n"
for i in range(100):
    b = torch.tanh(a @ a)
    sys.stdout.write(line * 1024)  # 1 MiB
    sys.stdout.buffer.write(b"\xff\xfe\x80 not utf-8\n")
    sys.stderr.buffer.write(b"\xc3\x28 invalid\n")
print("done")
