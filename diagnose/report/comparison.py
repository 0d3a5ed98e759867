"""What `diagnose compare BEFORE.json AFTER.json` found: typed data only, and its JSON form.

diagnose/compare.py fills these in, render/compare.py draws them, and
`--format json` writes them with `dumps`. The JSON keys are the field names
(docs/compare.md lists them), the keys the untyped version wrote; CI scripts
read them, so a field is renamed or removed only with a version of its own.
The one irregularity kept for them: `wall` has no `unit` and `drift_measured`
when a side has no wall time (direction "unknown"), as before.

Units live in the comments where the JSON keys (kept for compatibility) do
not carry them; ratios are after/before, percentages are percent (12.5, not
0.125).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from diagnose.report.io import to_dict

# a measured ratio against the noise floor: outside it "faster" or "slower", inside "same"; "unknown": a side
# has no wall time
Direction = Literal["faster", "slower", "same", "unknown"]
# an operator row: a Direction, or "new"/"gone" (measured on one side only)
OperatorStatus = Literal["faster", "slower", "same", "new", "gone"]
# a finding: "worse"/"better" by severity, "same" severity, or on one side only
FindingStatus = Literal["new", "worse", "gone", "better", "same"]


@dataclass(frozen=True)
class ComparedRun:
    """Which run one side is (the header of the comparison)."""

    target: str  # script, or script:function
    mode: str  # "script" or "function"
    started_at: str  # the report's run.started_at, as recorded


@dataclass(frozen=True)
class WallSide:
    """The uninstrumented wall time one report measured."""

    # seconds per `unit`: the median of the steps (or calls), or of the runs' medians with --repeat; a script
    # without steps: its wall time, or the median of its runs
    seconds: float
    unit: str  # "iteration" (a step or a call) or "run" (a script without steps)
    noise_pct: float | None  # within-run IQR/median in percent (of the first run); None: no steps, not measured
    n: int  # iterations measured (of the first run), or runs for a script without steps
    basis: str  # how `seconds` and `noise_pct` were obtained, in words
    runs_s: list[float] | None  # --repeat: each run's median in seconds, the first the baseline's; None: one run
    drift_pct: float | None  # --repeat: the runs' (slowest - fastest) / median in percent; None: one run


@dataclass(frozen=True)
class Interleaved:
    """`diagnose compare --repeat N`: both workloads re-run in N rounds of BEFORE, AFTER, AFTER, BEFORE
    (diagnose/interleave.py), each run its median step (or call, or its wall time without steps)."""

    rounds: int  # complete rounds (four runs that each measured a time)
    unit: str  # what the times are per: "iteration" or "run"
    before_s: list[float]  # BEFORE's runs' medians in seconds, in the order they ran (two a round)
    after_s: list[float]  # AFTER's
    round_ratios: list[float]  # per round: sqrt(after1 * after2 / (before1 * before2)), 4 decimals
    ratio: float  # after / before: the median round ratio, 4 decimals
    ci_low: float | None  # the median's distribution-free interval (sign test); None: too few rounds for one
    ci_high: float | None
    confidence: float | None  # the interval's coverage, 0-1 (at least 0.95)
    # the median within a round of |log(second run / first run)| of one side, as a percentage: how far the same
    # workload drifts within a round, and the floor a change must clear (at least --noise-floor)
    drift_pct: float
    failed: int = 0  # runs that ended without a time (their round is dropped)
    # rounds left out because a run in them waited for CPUs other processes held (interleave.waited_for_others)
    contended: int = 0
    contended_wait_pct: float | None = None  # the most such a run waited, % of its threads' runnable time
    usable_cpus: int | None = None  # the CPUs the runs could use (the contention test's bound)
    notes: list[str] = field(default_factory=list)  # what the re-runs could not hold equal, in words


@dataclass(frozen=True)
class WallComparison:
    """Wall time before and after, and whether the change is outside the noise."""

    before: WallSide | None  # None: that side has no wall time (the target failed, no baseline pass)
    after: WallSide | None
    ratio: float | None  # after / before seconds, 4 decimals; None when a side is missing
    speedup: float | None  # before / after (1 / ratio), 4 decimals
    change_pct: float | None  # 100 * (ratio - 1), 2 decimals: +15.0 is 15% slower
    noise_floor_pct: float | None  # a ratio is a change only outside 1 ± this (percent, 2 decimals)
    noise_basis: str  # how the floor was obtained, or why there is none
    significant: bool  # the change is outside the floor (and, with >= 3 runs a side, the runs do not overlap)
    direction: Direction
    # what `seconds` are per on both sides ("iteration", or "run" when the sides differ); None (not written to
    # JSON) when direction is "unknown"
    unit: str | None = None
    # both sides ran with --repeat, so the floor covers their measured run-to-run drift; None (not written to
    # JSON) when direction is "unknown"
    drift_measured: bool | None = None
    # --repeat N: the interleaved re-runs the verdict rests on (then before/after are their medians); None: the
    # verdict rests on the two reports as written
    interleaved: Interleaved | None = None


@dataclass(frozen=True)
class OperatorDelta:
    """One (operator, input shapes)'s self CPU time before and after, per `OperatorComparison.unit`.

    A side's fields are None when the operator did not run there with these shapes."""

    name: str  # aten::addmm
    input_shapes: list[list[Any]]  # as in the report's operator rows
    before_us: float | None  # self CPU time in microseconds per unit, 3 decimals
    after_us: float | None
    before_pct: float | None  # share of all operator self CPU time on that side, percent
    after_pct: float | None
    before_calls: float | None  # calls per unit (a fraction when a call does not happen every iteration)
    after_calls: float | None
    source: str | None  # file.py:LINE of the user line with most of its time (before's, else after's)
    ratio: float | None  # after_us / before_us, 4 decimals; None for new and gone rows
    status: OperatorStatus
    delta_us: float  # after_us - before_us in microseconds per unit (a missing side counts 0), 3 decimals


@dataclass(frozen=True)
class OperatorComparison:
    """The operator pass's self CPU times per (operator, input shapes), biggest change first."""

    unit: str  # what the times are per: "iteration" (function mode) or "run"
    noise_floor_pct: float  # a row's ratio is a change only outside 1 ± this (percent, 2 decimals)
    noise_basis: str  # how the floor was obtained, in words
    rows: list[OperatorDelta] = field(default_factory=list)  # over OPERATOR_MIN_PCT of the time on either side
    total_before_us: float | None = None  # all operators' self CPU time in microseconds per unit; None: no rows
    total_after_us: float | None = None
    comparable: bool = True  # both sides per the same unit (false: one per iteration, the other per run)


@dataclass(frozen=True)
class FindingChange:
    """One finding (or a finding merged into another) matched across the two reports."""

    kind: str  # the rule's kind (after's when on both sides)
    op: str | None  # the operator it names, if any
    status: FindingStatus
    before_severity: str | None  # "high", "medium", "low"; None: not found before
    after_severity: str | None  # None: gone
    before_location: str | None  # file.py:LINE of the finding (or of the finding it is merged into)
    after_location: str | None
    before_stake_pct: float | None  # time at stake in percent of the run (Finding.stake.pct)
    after_stake_pct: float | None
    title: str  # after's title when on both sides


@dataclass(frozen=True)
class Comparison:
    """Everything that changed from BEFORE to AFTER (`diagnose compare`)."""

    before: ComparedRun
    after: ComparedRun
    wall: WallComparison
    operators: OperatorComparison
    findings: list[FindingChange]  # new, worse, gone, better, same; by severity within each
    notes: list[str]  # what differs between the two runs besides the code (arguments, window, machine, errors)
    verdict: str  # the one line printed first
    regression_pct: float  # wall time's change_pct when it got slower outside the noise, else 0.0 (the CI gate)
    min_floor_pct: float  # the smallest floor any change gets, percent (--noise-floor)


def to_json_data(cmp: Comparison) -> dict:
    """Plain JSON data, the keys docs/compare.md lists."""
    data = to_dict(cmp)
    wall = data["wall"]
    for key in ("unit", "drift_measured"):  # absent when direction is "unknown" (module docstring)
        if wall[key] is None:
            del wall[key]
    return data


def dumps(cmp: Comparison) -> str:
    return json.dumps(to_json_data(cmp), indent=1, allow_nan=False, default=str)
