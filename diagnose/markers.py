"""The files a pass's runner leaves in its workdir, so that observers outside the target
(the thread sampler, perf) measure the same part of the run as the pass itself.

- `started`: the workload begins (after interpreter start-up and torch's import);
- `window`: script mode, the measured window of steps begins (diagnose/steps.py):
  what an observer saw before it was setup and warm-up, and is discarded;
- `stopped`: the measured part ends (observers stop there, not at interpreter exit).

A run without steps never writes `window`: the whole workload is measured.
"""

from __future__ import annotations

import os

START = "started"
WINDOW = "window"
STOP = "stopped"


def touch(directory: str, name: str) -> None:
    with open(os.path.join(directory, name), "w"):
        pass
