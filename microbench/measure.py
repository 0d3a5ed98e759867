"""Timing with torch.utils.benchmark: thread control, warm-up, budget, ABBA rounds.

Contract
- One `Timer` per (case, thread count); `Timer(num_threads=n)` sets the
  intra-op pool for the duration of each call and restores it after.
- Inputs are built once per case and handed to the Timer as `globals`
  (setup `pass`): `timeit` re-runs `setup` before every block, and for large
  inputs building them would cost more than the measured op.
- After every thread change, a warm-up (`Timer.timeit(number=1)`: 2 untimed
  calls and 1 timed, 3 calls in all) lets the OpenMP pool grow and caches fill
  before `adaptive_autorange(threshold, max_run_time)` measures. The
  adaptive loop stops when IQR/median < threshold (after >= 4 blocks and
  `min_run_time`, which we raise from torch's 0.01 s to min(0.2 s,
  max_run_time / 2) so a few quiet blocks cannot decide alone) or when
  `max_run_time` is spent; block sizing and warm-up
  are outside `max_run_time`, so a measurement can overrun it by about one
  block plus ~50 ms.
- `Budget` is a wall-clock allowance checked between measurements only:
  no new measurement starts once it is spent; a running one is not cut.
- ABBA: `abba_rounds(measure_a, measure_b, rounds)` calls A, B, B, A per
  round; the callables return seconds per call and are injected, so tests use
  a fake timer with seeded noise. `block_measure(stmt, globals, threads,
  number)` is the real one: one timed `timeit` block, preceded by one warm-up
  call whenever the thread count changes. Callers restore the thread count.
- `timer=` is passed through to `Timer`, so a fake clock makes the adaptive
  loop exact in tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from microbench.stats import AbbaRound, Summary, summarize


@dataclass
class Timing:
    threads: int
    number_per_run: int
    times_s: list[float]             # per-call time of each measured block
    summary: Summary


class Budget:
    """Wall-clock allowance in seconds; `clock` is injectable for tests."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds = seconds
        self._clock = clock
        self._start = clock()

    @property
    def spent(self) -> float:
        return self._clock() - self._start

    @property
    def remaining(self) -> float:
        return float("inf") if self.seconds is None else max(0.0, self.seconds - self.spent)

    @property
    def exhausted(self) -> bool:
        return self.seconds is not None and self.spent >= self.seconds


def make_timer(stmt: str, globals_: dict[str, Any], threads: int, *, label: str | None = None,
               sub_label: str | None = None, timer: Callable[[], float] | None = None):
    from torch.utils.benchmark import Timer

    kwargs = {} if timer is None else {"timer": timer}
    return Timer(stmt=stmt, setup="pass", globals=globals_, num_threads=threads, label=label,
                 sub_label=sub_label, description=f"{threads} thread{'s' if threads != 1 else ''}", **kwargs)


def warm_up(timer, calls: int = 1) -> float:
    """Run at the timer's thread count; returns the per-call time seen (seconds).

    `Timer.timeit(number=n)` sets the thread count, runs max(n // 100, 2) untimed calls, then n timed ones.
    """
    m = timer.timeit(number=calls)
    return m.raw_times[0] / calls


def measure(timer, threads: int, *, max_run_time: float, threshold: float = 0.1,
            min_run_time: float = 0.2, warmup_calls: int = 1) -> Timing:
    # torch's default min_run_time (0.01 s) lets 4 blocks of a 5 ms op decide; on a shared machine a
    # quiet 20 ms window is not a measurement. Half the allowance, at most 0.2 s, gathers more blocks.
    min_run_time = min(min_run_time, max_run_time / 2)
    warm_up(timer, warmup_calls)
    m = timer.adaptive_autorange(threshold=threshold, min_run_time=min_run_time, max_run_time=max_run_time)
    times = list(m.times)
    return Timing(threads=threads, number_per_run=m.number_per_run, times_s=times, summary=summarize(times))


def per_measurement_time(budget: Budget, left: int, cap: float, floor: float = 0.05) -> float:
    """max_run_time for the next measurement: an equal share of what is left, within [floor, cap]."""
    share = budget.remaining / max(left, 1)
    return max(floor, min(cap, share))


# --------------------------------------------------------------------------
# ABBA
# --------------------------------------------------------------------------

def block_measure(stmt: str, globals_: dict[str, Any], threads: int, number: int) -> Callable[[], float]:
    """Seconds per call of one timed block of `number` calls at `threads`.

    The same `timeit` loop torch's Timer uses, without its per-call warm-up
    (2+ untimed calls per block, which would triple the cost of a slow op):
    we warm up with one call only when the thread count actually changes.
    """
    import timeit

    import torch

    t = timeit.Timer(stmt, globals=globals_)

    def run() -> float:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
            t.timeit(1)  # warm-up after the thread change
        return max(t.timeit(number), 1e-9) / number
    return run


def calibrate(timer, block_s: float) -> tuple[int, float]:
    """(calls per block so a block lasts ~block_s, per-call estimate)."""
    per_call = warm_up(timer, 3)
    if per_call * 3 < block_s / 10:
        per_call = warm_up(timer, max(3, int(block_s / 10 / max(per_call, 1e-9))))
    return max(1, int(round(block_s / max(per_call, 1e-9)))), per_call


def abba_rounds(measure_a: Callable[[], float], measure_b: Callable[[], float], rounds: int,
                budget: Budget | None = None, min_rounds: int = 0) -> list[AbbaRound]:
    """Interleaved A, B, B, A rounds; stops early only when the budget is spent (after min_rounds)."""
    out: list[AbbaRound] = []
    for _ in range(rounds):
        if budget is not None and budget.exhausted and len(out) >= min_rounds:
            break
        a1 = measure_a()
        b1 = measure_b()
        b2 = measure_b()
        a2 = measure_a()
        out.append(AbbaRound(a1, b1, b2, a2))
    return out
