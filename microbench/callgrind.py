"""Instruction counts through `Timer.collect_callgrind` (valgrind's callgrind).

Contract
- `unavailable()` -> None when valgrind, callgrind_control and
  callgrind_annotate are on PATH, else the reason (a normal outcome).
- `collect(case, number)` -> `Counts` at ONE thread: instructions per call
  (the case's setup code runs inside the valgrind child, since callgrind
  cannot take tensors as globals; `number` calls are counted with
  `repeats=1`, and the interpreter's empty-loop baseline, collected in the
  same child, is subtracted, both denoised), and the function-level counts
  behind it: `CallgrindStats.as_standardized().stats(inclusive=False)`
  (library paths stripped, so two builds or machines diff cleanly), the
  `top` functions by count, for all `number` calls. That is what
  `stats().delta()` needs later, when the Timer object is long gone.
- `function_delta(a, b)` is `CallgrindStats.delta` on two such saved lists,
  per call, denoised (`FunctionCounts.denoise`: CPython's unicode dict
  lookups, which jitter): the functions that account for an A/B difference.
- Counts are deterministic up to interpreter jitter, and blind to waiting
  and memory stalls: they complement wall time, not replace it. valgrind
  emulates no AVX-512: torch's dispatcher picks its AVX2 kernels under it
  even on a machine whose native runs use AVX-512.
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
from dataclasses import dataclass
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


TOP_FUNCTIONS = 200   # function counts kept per result: the delta of two results is exact above the cut


@dataclass
class Counts:
    instructions_per_call: int            # denoised, empty-loop baseline subtracted
    number: int                           # calls counted
    total: int                            # exclusive instructions of all `number` calls, every function
    functions: list[tuple[int, str]]      # (count over `number` calls, standardized name), top by |count|


def collect(case: Case, number: int, top: int = TOP_FUNCTIONS) -> Counts:
    """Instruction counts at one thread, per call and by function."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt=case.stmt(), setup="import torch\n" + case.setup_code(), num_threads=1)
    with _own_python_first_on_path():
        stats = timer.collect_callgrind(number=number, repeats=1, collect_baseline=True)
    stats = stats[0] if isinstance(stats, tuple) else stats
    return counts_of(stats, number, top)


def counts_of(stats, number: int, top: int = TOP_FUNCTIONS) -> Counts:
    """What a results file keeps of a `CallgrindStats`."""
    fns = stats.as_standardized().stats(inclusive=False)
    ranked = sorted(((int(c), str(f)) for c, f in fns), key=lambda cf: (-abs(cf[0]), cf[1]))
    return Counts(instructions_per_call=instructions_per_call(stats, number), number=number,
                  total=int(fns.sum()), functions=ranked[:top])


def instructions_per_call(stats, number: int) -> int:
    total = stats.counts(denoise=True)
    baseline = stats.baseline_exclusive_stats.denoise().sum()
    return int(round(max(total - baseline, 0) / number))


def function_counts(functions: list, number: int):
    """A saved list back into torch's `FunctionCounts`, per call (exclusive)."""
    from torch.utils.benchmark.utils.valgrind_wrapper.timer_interface import FunctionCount, FunctionCounts

    per_call = [FunctionCount(c / max(number, 1), f) for c, f in functions]
    return FunctionCounts(tuple(sorted(per_call, reverse=True)), inclusive=False)


# `FunctionCounts.denoise()` drops "dictobject.c:lookdict_unicode", CPython's string-keyed dict lookup,
# whose count jitters from run to run (hash randomisation). Python 3.11 renamed it
# unicodekeys_lookup_unicode, which torch's filter misses: two callgrind runs of the same aten::add here
# differed by 3,885 instructions in it and by < 100 in every other frequent CPython function. Both go.
NOISY_FUNCTIONS = ("dictobject.c:lookdict_unicode", "dictobject.c:unicodekeys_lookup_unicode")


def denoise(counts):
    """torch's `FunctionCounts.denoise()`, plus the Python 3.11 name of the same noisy lookup."""
    return counts.denoise().filter(lambda fn: not any(n in fn for n in NOISY_FUNCTIONS))


def function_delta(a_functions: list, a_number: int, b_functions: list, b_number: int,
                   top: int = 15) -> list[tuple[float, str]]:
    """B - A per call by function, denoised, largest |delta| first (Timer quick start: `b.delta(a).denoise()`)."""
    delta = denoise(function_counts(b_functions, b_number) - function_counts(a_functions, a_number))
    ranked = sorted(((c, f) for c, f in delta if abs(c) >= 0.5), key=lambda cf: (-abs(cf[0]), cf[1]))
    return ranked[:top]
