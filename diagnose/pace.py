"""The pace reference: how fast this process's CPU runs a fixed piece of vector work right now (trial passes).

On a VM each vCPU steps between a fast state and states 1.2-3x slower, for a tenth of a second to seconds at a
time, independently of the other (benchmarks/RESULTS.md "vCPU speed"), so a fresh process's steps can be 1.5x
slower than its neighbour's for its whole short life: one-thread steps of 2 ms spread 10-30% from pass to pass
(the median |log ratio| of adjacent passes) on an Intel Xeon VM. Timed in the same pass, just before the
window and just after it, this reference followed them (correlation 0.8-0.9 of the logs), and the steps divided
by it spread 5-11% (benchmarks/trial_pace.py). A trial judges its sides on the steps so divided where that
steadies its own baseline (doctor/trials.py `paced`).

The work: torch.sin over 1 MiB of float32, in chunks under ATen's parallel grain (32,768 elements), so that
every call runs on the calling thread whatever the intra-op thread count (a trial that changes the thread count
times the same reference on both sides), into a preallocated output (no allocation: an allocator trial's
LD_PRELOAD does not touch it) of values far from the subnormal range (flush_denormal does not either). PACE_REPEATS
sweeps, their median: about 2-3 ms a reading. A pure-Python loop followed the states less well (correlation
0.5-0.8): the slow states slow vector work more than scalar.
"""

from __future__ import annotations

import statistics
import time

PACE_CHUNK = 16_384  # float32 elements a call: under ATen's GRAIN_SIZE (32,768), so no call is split across threads
PACE_CHUNKS = 16  # 1 MiB a sweep
PACE_REPEATS = 10


class Pace:
    """The reference's buffers, made once in a pass (before its window), and `read()`: one reading, seconds a
    sweep (the median of PACE_REPEATS)."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.inputs = [torch.rand(PACE_CHUNK) + 0.5 for _ in range(PACE_CHUNKS)]
        self.outputs = [torch.empty(PACE_CHUNK) for _ in range(PACE_CHUNKS)]
        self._sweep()  # warm: the kernels' first call, the buffers in cache

    def _sweep(self) -> float:
        sin = self.torch.sin
        start = time.perf_counter()
        for x, out in zip(self.inputs, self.outputs):
            sin(x, out=out)
        return time.perf_counter() - start

    def read(self) -> float:
        return statistics.median(self._sweep() for _ in range(PACE_REPEATS))
