"""Timing with torch.utils.benchmark: thread control, warm-up, budget, ABBA rounds.

Contract
- The thread counts of one case are measured together, interleaved
  (`interleaved`): in turns of TURN_S each, in alternating order (1, 2, 2, 1,
  ...), until each count has had its allowance. A 2-CPU VM's vCPUs change
  speed on their own, by 1.3-3x, for a tenth of a second to a few seconds at a
  time, unseen as steal (benchmarks/RESULTS.md "vCPU speed"): measured one after
  the other, a 1 s measurement at 2 threads could fall wholly in a slow stretch
  of one vCPU, and the same operator read 1.15 ms in one run and 0.72-0.85 ms
  in the next beside 1.2 ms on one thread. Interleaved, every count meets the
  same stretches, as a trial's sides do.
- Beside each case a reference is measured in the same rounds, in turns of
  BESIDE_TURN_S (`reference_side`: torch.sin over 1 MiB a thread, split
  evenly): its speedup is what the CPUs gave perfectly parallel work
  meanwhile, for a stretch that lasts the whole case (api.py
  `Row.reference_speedup`).
- Inputs are built once per case and handed to the timers as `globals`
  (setup `pass`): `timeit` re-runs `setup` before every block, and for large
  inputs building them would cost more than the measured op.
- Each count is first warmed up and sized with torch's `Timer(num_threads=n)`
  (`calibrate`: `Timer.timeit`, 2 untimed calls and the timed ones, so the
  OpenMP pool grows and caches fill), to blocks of about BLOCK_S (at least one
  call); its turns then time whole blocks with the timeit loop torch's Timer
  uses (`block_measure`), one untimed call after every thread change for an
  operator shorter than a block (a longer one's turn is its own). A block's
  time per call is one sample; median and IQR over a count's blocks.
- adaptive (default) stops once every count has had `min_run_time` (min(0.2 s,
  max_run_time / 2)) and at least 4 blocks with IQR/median < threshold, or
  when every count has had `max_run_time`; blocked runs every count to
  `max_run_time`, no early stop (steadier, never cheaper). Either way every
  case gets at least MIN_TURNS rounds, and the case decides: the reference
  beside it takes the same turns. Warm-up and sizing are outside the
  allowance, and a turn ends after the block that passes TURN_S, so a
  measurement can overrun it by about one block a turn (and an operator
  slower than its allowance runs MIN_TURNS calls a count).
- Each turn's median per call is kept (`Timing.turns_s`, a row's
  `turns_us`): the i-th turns of a case's counts ran side by side, so their
  ratios pair (findings/microbench.py speedup_noise).
- `Budget` is a wall-clock allowance checked between measurements only:
  no new measurement starts once it is spent; a running one is not cut.
- ABBA: `abba_rounds(measure_a, measure_b, rounds)` calls A, B, B, A per
  round; the callables return seconds per call and are injected, so tests use
  a fake timer with seeded noise. `block_measure(stmt, globals, threads,
  number)` is the real one: one timed `timeit` block, preceded by one warm-up
  call whenever the thread count changes. Callers restore the thread count.
- `timer=` is passed through to the timers, so a fake clock makes the loop
  exact in tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from microbench.stats import AbbaRound, Summary, summarize


@dataclass
class Timing:
    threads: int
    number_per_run: int
    times_s: list[float]             # per-call time of each measured block
    summary: Summary
    # per-call median of each turn's blocks, in turn order (`interleaved`): the i-th turns of two counts ran in the
    # same round, side by side, so their ratio is paired
    turns_s: list[float] = field(default_factory=list)


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
# a count's turn: far shorter than a vCPU's slow stretch (0.1-0.3 s of correlated speed, measured), so a count's
# blocks land in the same stretches as the others'
TURN_S = 0.025
BLOCK_S = 0.002  # a block's length: a dozen samples a turn, the timer's overhead negligible
# rounds every case gets, whatever its allowance: a count's turns pair with the others' (findings/microbench.py
# PAIRED_MIN_TURNS), and an operator slower than its allowance still gets this many (a 4M sort: 0.6 s a call)
MIN_TURNS = 4
# a side beside the case (the reference) takes shorter turns: a few of its blocks pin its median, and equal turns
# doubled every case's time (the suite's serial step ran 117 s longer)
BESIDE_TURN_S = 0.005


# the control measured beside every case (`reference_side`): a compute-bound kernel torch splits evenly across its
# threads, its inputs in each thread's L2, so its speedup at n threads is what the CPUs gave parallel work while the
# case ran (a VM's vCPU slowed for the whole case makes it, and every case beside it, fall short of n)
REFERENCE_STMT = "torch.sin(reference_in, out=reference_out)"
REFERENCE_NUMEL_PER_THREAD = 262_144  # 1 MiB of float32 a thread: ~0.15 ms of sin a thread here


def reference_side(threads: list[int]) -> tuple[str, dict[str, Any]]:
    """The reference's (stmt, globals) for a case measured at `threads`."""
    import torch

    x = torch.rand(REFERENCE_NUMEL_PER_THREAD * max(threads))
    return REFERENCE_STMT, {"torch": torch, "reference_in": x, "reference_out": torch.empty_like(x)}


def interleaved(sides: list[tuple[str, dict[str, Any]]], threads: list[int], *, max_run_time: float,
                threshold: float = 0.1, min_run_time: float = 0.2, autorange: str = "adaptive",
                timer: Callable[[], float] | None = None, turn_s: float = TURN_S,
                block_s: float = BLOCK_S, beside_turn_s: float = BESIDE_TURN_S) -> list[list[Timing]]:
    """For each side, (stmt, globals), one Timing per thread count in `threads`, all measured interleaved
    (module docstring): turns of `turn_s`, every side at one count, then the next count, in alternating order,
    until the first side (the case) has had `max_run_time` at every count (adaptive: stops earlier once every
    count has had min(min_run_time, max_run_time / 2) and 4 blocks with IQR/median < threshold), after at least
    MIN_TURNS rounds. The sides after the first take turns of `beside_turn_s`. The caller's intra-op thread
    count is restored."""
    import torch

    if autorange not in AUTORANGES:
        raise ValueError(f"autorange must be one of {AUTORANGES}, got {autorange!r}")
    before = torch.get_num_threads()
    min_run_time = min(min_run_time, max_run_time / 2)
    keys = [(i, n) for n in threads for i in range(len(sides))]
    try:
        numbers: dict[tuple[int, int], int] = {}
        runs: dict[tuple[int, int], Callable[[], float]] = {}
        for i, n in keys:
            stmt, globals_ = sides[i]
            numbers[i, n], per_call = calibrate(make_timer(stmt, globals_, n, timer=timer), block_s, first_calls=1)
            runs[i, n] = block_measure(stmt, globals_, n, numbers[i, n], timer=timer, warm=per_call < block_s)
        times: dict[tuple[int, int], list[float]] = {k: [] for k in keys}
        turns: dict[tuple[int, int], list[float]] = {k: [] for k in keys}
        spent = dict.fromkeys(keys, 0.0)

        case = [k for k in keys if k[0] == 0]  # the case decides; a reference beside it takes the same turns

        def done() -> bool:
            if all(spent[k] >= max_run_time for k in case):
                return True
            return autorange == "adaptive" and all(
                spent[k] >= min_run_time and len(times[k]) >= 4 and summarize(times[k]).noise < threshold
                for k in case)

        turn = 0
        while turn < MIN_TURNS or not done():
            for k in (keys if turn % 2 == 0 else keys[::-1]):
                taken, turn_times = 0.0, []
                while taken < (turn_s if k[0] == 0 else beside_turn_s):
                    per_call = runs[k]()
                    turn_times.append(per_call)
                    taken += per_call * numbers[k]
                times[k] += turn_times
                turns[k].append(summarize(turn_times).median)
                spent[k] += taken
            turn += 1
    finally:
        torch.set_num_threads(before)
    return [[Timing(threads=n, number_per_run=numbers[i, n], times_s=times[i, n], summary=summarize(times[i, n]),
                    turns_s=turns[i, n]) for n in threads] for i in range(len(sides))]


def per_measurement_time(budget: Budget, left: int, cap: float, floor: float = 0.05) -> float:
    """max_run_time for the next measurement: an equal share of what is left, within [floor, cap]."""
    share = budget.remaining / max(left, 1)
    return max(floor, min(cap, share))


# --------------------------------------------------------------------------
# ABBA
# --------------------------------------------------------------------------

def block_measure(stmt: str, globals_: dict[str, Any], threads: int, number: int,
                  sub_blocks: int = 1, timer: Callable[[], float] | None = None,
                  warm: bool = True) -> Callable[[], float]:
    """Seconds per call of one timed slot of `number` calls at `threads`.

    The same `timeit` loop torch's Timer uses, without its per-call warm-up
    (2+ untimed calls per block, which would triple the cost of a slow op):
    we warm up with one call only when the thread count actually changes.
    With `sub_blocks` m > 1 the slot is m timed sub-blocks of number/m calls
    (at least 1) and its time is their minimum: on a shared machine the
    noise is one-sided (a preempted or cache-evicted sub-block is only ever
    slower), so the fastest sub-block is the one that ran alone. `warm=False`
    leaves out the warm-up call (`interleaved`, for an operator whose call is
    a block or more: the pool exists and the inputs are in cache from the
    turn before, and the call would double the cost of each turn).
    """
    import timeit

    import torch

    t = timeit.Timer(stmt, globals=globals_, timer=timer or timeit.default_timer)
    m = max(1, min(sub_blocks, number))
    per = max(1, number // m)

    def run() -> float:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
            if warm:
                t.timeit(1)  # warm-up after the thread change
        return min(max(t.timeit(per), 1e-9) / per for _ in range(m))
    return run


def calibrate(timer, block_s: float, first_calls: int = 3) -> tuple[int, float]:
    """(calls per block so a block lasts ~block_s, per-call estimate), after a warm-up of `first_calls`."""
    per_call = warm_up(timer, first_calls)
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
