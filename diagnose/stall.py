"""Stall detection: a pass whose process tree stopped using the CPU is hung, not slow.

Parent side (`StallWatch`): every second the pass's process tree's CPU time
(utime+stime of the root and every descendant, /proc) is read; when over the
last `stall_after_s` seconds the tree used less than STALL_CPU_SHARE (2%) of
one CPU, the pass is stalled. A workload that waits on input by design sets
`--stall-after 0`.

Then every runner of the pass (the child, or each torchrun rank) gets
SIGUSR1: the runner installed `faulthandler` on it (runner.install_stack_dump),
which writes every Python thread's stack into `stacks.txt` in its workdir,
even while C++ code holds the GIL (a gloo destructor deadlock does).
`parse` turns that text into threads and frames; `Hang` in the report keeps
them, and findings/hangs.py names the user's line and the library frame the
main thread is stuck in.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Callable

from diagnose import procfs

STALL_AFTER_S = 60.0  # --stall-after's default: longer than any rendezvous or data fetch we have seen idle
STALL_CPU_SHARE = 0.02
CHECK_EVERY_S = 1.0
STACKS_FILE = "stacks.txt"
DUMP_WAIT_S = 1.0
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


class StallWatch:
    """Is the tree rooted at `root_pid` idle for `stall_after_s` seconds? (module docstring)"""

    def __init__(self, root_pid: int, stall_after_s: float, clock: Callable[[], float] = time.monotonic,
                 tree_ticks: Callable[[int], int] | None = None):
        self.root_pid = root_pid
        self.stall_after_s = stall_after_s
        self.clock = clock
        self.tree_ticks = tree_ticks or _tree_ticks
        self.ticks_per_s = procfs.clock_ticks_per_s()
        self.samples: list[tuple[float, int]] = []
        self.next_check = 0.0

    def stalled(self) -> bool:
        now = self.clock()
        if now < self.next_check:
            return False
        self.next_check = now + CHECK_EVERY_S
        self.samples.append((now, self.tree_ticks(self.root_pid)))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.stall_after_s:
            self.samples.pop(0)  # keep one sample at least stall_after_s old
        t0, ticks0 = self.samples[0]
        if now - t0 < self.stall_after_s:
            return False
        used_s = (self.samples[-1][1] - ticks0) / self.ticks_per_s
        return used_s < STALL_CPU_SHARE * (now - t0)

    def idle_s(self) -> float:
        return self.samples[-1][0] - self.samples[0][0] if len(self.samples) > 1 else 0.0


def _tree_ticks(root_pid: int) -> int:
    total = 0
    for pid in procfs.descendants(root_pid):
        info = procfs.read_process(pid)
        if info is not None:
            total += info.cpu_ticks
    return total


def request_dumps(pids: list[int]) -> None:
    """Ask each runner to write its threads' stacks (faulthandler on SIGUSR1), and give them a moment."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(DUMP_WAIT_S)


def parse(text: str) -> list[dict]:
    """faulthandler's dump -> [{"thread": "0x...", "current": bool, "frames": [(file, line, function), ...]}],
    frames innermost first, as faulthandler writes them."""
    threads: list[dict] = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append({"thread": head.group(2), "current": head.group(1) == "Current thread", "frames": []})
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1]["frames"].append((frame.group(1), int(frame.group(2)), frame.group(3).strip()))
    return threads
