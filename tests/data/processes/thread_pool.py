"""A model served from a ThreadPoolExecutor(4), as inference servers do (issue 33): every forward runs in a
worker thread, none in the main one."""

from concurrent.futures import ThreadPoolExecutor
import torch
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
x = torch.randn(32, 256)
def serve(i):
    with torch.no_grad():
        return model(x).sum().item()
with ThreadPoolExecutor(4) as ex:
    for _ in range(30):
        list(ex.map(serve, range(16)))
print("done")
