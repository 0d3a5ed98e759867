"""Instruction counts through `Timer.collect_callgrind` (valgrind's callgrind).

Contract
- `unavailable()` -> None when valgrind, callgrind_control and
  callgrind_annotate are on PATH, else the reason (a normal outcome).
- `collect(case, number)` -> instructions per call at ONE thread: the case's
  setup code runs inside the valgrind child (callgrind cannot take tensors as
  globals), `number` calls are counted with `repeats=1`, and the interpreter's
  empty-loop baseline (collected in the same child) is subtracted, both
  denoised. Counts are deterministic up to interpreter jitter, and blind to
  waiting and memory stalls: they complement wall time, not replace it.
- Cost: valgrind emulates the whole Python + torch start-up; about two minutes
  for a tiny op on these machines, whatever `number` is.
- torch's wrapper launches `python` from PATH and checks it is the same
  interpreter; we put this interpreter's directory first on PATH for the call.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from typing import Iterator

from microbench.cases import Case

TOOLS = ("valgrind", "callgrind_control", "callgrind_annotate")


def unavailable() -> str | None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    return f"{', '.join(missing)} not on PATH" if missing else None


def choose_number(median_s: float | None, target_s: float = 0.01, cap: int = 100) -> int:
    """Calls to count: about target_s of native run time, 1..cap."""
    if not median_s or median_s <= 0:
        return 10
    return max(1, min(cap, int(target_s / median_s)))


@contextlib.contextmanager
def _own_python_first_on_path() -> Iterator[None]:
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


def collect(case: Case, number: int) -> int:
    """Instructions per call (baseline-subtracted, denoised) at one thread."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt=case.stmt(), setup="import torch\n" + case.setup_code(), num_threads=1)
    with _own_python_first_on_path():
        stats = timer.collect_callgrind(number=number, repeats=1, collect_baseline=True)
    stats = stats[0] if isinstance(stats, tuple) else stats
    return instructions_per_call(stats, number)


def instructions_per_call(stats, number: int) -> int:
    total = stats.counts(denoise=True)
    baseline = stats.baseline_exclusive_stats.denoise().sum()
    return int(round(max(total - baseline, 0) / number))
