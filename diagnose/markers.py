"""The files a pass's runner leaves in its workdir, so that observers outside the target
(the thread sampler, perf) measure the same part of the run as the pass itself.

- `started`: the workload begins (after interpreter start-up and torch's import);
- `window`: script mode, the measured window of steps begins (diagnose/steps.py):
  what an observer saw before it was setup and warm-up, and is discarded;
- `stopped`: the measured part ends (observers stop there, not at interpreter exit).

A run without steps never writes `window`: the whole workload is measured.

Before it writes `started` the runner waits (up to READY_WAIT_S) for the
files its spec lists under `wait_for`: observers that start slower than a
pass forked from the fork server (the thread sampler is a process of its own)
create theirs once they watch for the markers.
"""

from __future__ import annotations

import os

START = "started"
WINDOW = "window"
STOP = "stopped"
READY_WAIT_S = 5.0


def wait_for(paths: list[str], timeout_s: float = READY_WAIT_S) -> None:
    """Until every path exists, or timeout_s (an observer that fails to start must not stop the target)."""
    import time

    deadline = time.monotonic() + timeout_s
    while any(not os.path.exists(p) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.005)


def touch(directory: str, name: str) -> None:
    with open(os.path.join(directory, name), "w"):
        pass
