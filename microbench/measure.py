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
  block plus ~50 ms. `autorange="blocked"` uses `blocked_autorange` instead:
  blocks of >= 10 ms until `max_run_time` is spent, no early stop.
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


AUTORANGES = ("adaptive", "blocked")


def measure(timer, threads: int, *, max_run_time: float, threshold: float = 0.1,
            min_run_time: float = 0.2, warmup_calls: int = 1, autorange: str = "adaptive") -> Timing:
    """adaptive: `adaptive_autorange(threshold, min_run_time, max_run_time)`, stops once IQR/median <
    threshold; blocked: `blocked_autorange(min_run_time=max_run_time)`, blocks until the whole allowance
    is spent (more blocks, no early stop: steadier on a shared machine, never cheaper)."""
    if autorange not in AUTORANGES:
        raise ValueError(f"autorange must be one of {AUTORANGES}, got {autorange!r}")
    warm_up(timer, warmup_calls)
    if autorange == "blocked":
        m = timer.blocked_autorange(min_run_time=max_run_time)
    else:
        # torch's default min_run_time (0.01 s) lets 4 blocks of a 5 ms op decide; on a shared machine a
        # quiet 20 ms window is not a measurement. Half the allowance, at most 0.2 s, gathers more blocks.
        min_run_time = min(min_run_time, max_run_time / 2)
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

def block_measure(stmt: str, globals_: dict[str, Any], threads: int, number: int,
                  sub_blocks: int = 1, timer: Callable[[], float] | None = None) -> Callable[[], float]:
    """Seconds per call of one timed slot of `number` calls at `threads`.

    The same `timeit` loop torch's Timer uses, without its per-call warm-up
    (2+ untimed calls per block, which would triple the cost of a slow op):
    we warm up with one call only when the thread count actually changes.
    With `sub_blocks` m > 1 the slot is m timed sub-blocks of number/m calls
    (at least 1) and its time is their minimum: on a shared machine the
    noise is one-sided (a preempted or cache-evicted sub-block is only ever
    slower), so the fastest sub-block is the one that ran alone.
    """
    import timeit

    import torch

    t = timeit.Timer(stmt, globals=globals_, timer=timer or timeit.default_timer)
    m = max(1, min(sub_blocks, number))
    per = max(1, number // m)

    def run() -> float:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
            t.timeit(1)  # warm-up after the thread change
        return min(max(t.timeit(per), 1e-9) / per for _ in range(m))
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
