"""os.fork() and waitpid: the child does torch work and leaves through os._exit, the parent waits for it."""

import os

import torch

if __name__ == "__main__":
    pid = os.fork()
    if pid == 0:
        a = torch.randn(200, 200)
        for _ in range(20):
            a @ a
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(status))
