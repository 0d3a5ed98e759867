"""A script that finishes plainly and blocks only when a profile hook is installed (as the call-graph pass's
cProfile does): a stand-in for instrumentation that deadlocks a script, to test that such a hang is reported as
diagnose's, never as the user's (issue 33)."""

import sys
import threading

import torch

x = torch.ones(64, 64)
outputs = [torch.tanh(x @ x) for _ in range(20)]  # not a `for` loop: no loop step window ends a pass before the wait
if sys.getprofile() is not None:
    threading.Event().wait()  # only under a profiler: the plain run never gets here
print("done")
