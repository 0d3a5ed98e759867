"""`diagnose compare --repeat N`: both reports' workloads run again, interleaved, for a verdict on whole runs.

Two reports made one after the other on a shared machine can land in different states of it: on a 2-CPU VM the
same step took 4.0 ms in one group of back-to-back runs and 7.5 ms in the next (benchmarks/RESULTS.md, "diagnose
compare"). Within-run noise does not see that, and `--repeat 3` on each side only sees it when a shift happens
inside a side's group, so no floor read from the two reports tells such a shift from a change.

This module runs both targets again, in N rounds of BEFORE, AFTER, AFTER, BEFORE (each run the uninstrumented
workload over the same window as its report, forked from a fork server of its own, its output kept from the
terminal), after one warm-up run of each side that is not counted: it finds the window as the first pass does,
and in benchmarks/compare_interleaved.py's first run the first run of a side took up to 4.5x the others (the
fork server just started, the window still to find), which turned the first round around in 2 of 20 planted
pairs. A side whose warm-up run fails stops the comparison (RerunError: the script does not run again as it
ran); a later run that fails drops its round. A shift that lasts longer than a round hits both sides of that
round alike, and a steady drift within a round cancels between its two halves. Each round gives one ratio; the
change is called on the median round ratio's sign-test interval, the rule microbench's interleaved A/B uses
(microbench.stats.abba_summary): the interval must exclude 1, and the ratio must clear a floor, the larger of
--noise-floor and how far one side's two runs of a round drift apart (their median).

A round in which a run's threads waited for CPUs that other processes held (`contended`: schedstat's wait over
the window, protocol.Scheduling) is left out of the verdict and counted. Such a run measures the machine, not the
change: on this 2-CPU VM, with one busy process beside a 2-thread target, a step of eight 128x128 matmuls took
0.3 ms in some runs and 120 ms in others, the whole run in one regime or the other (OpenMP's spinning threads
behind the busy one), and 6 rounds of a 3x change read 0.61x. A wait caused by the target's own threads (more of
them runnable than there are CPUs) is the target's doing and is measured like any other time.

A report can be run again only as it ran: its script's absolute path, working directory and SHA-256 are in
report.target (diagnose records them); a script that changed since, a report without them, an attached process
and a torchrun job are refused with the reason. Only the script file is checked: a module it imports that
changed is not seen (the notes say so).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace

from diagnose import machine
from diagnose.config import Config
from diagnose.errors import RerunError, UsageError
from diagnose.findings.threads import EXTERNAL_WAIT_SHARE_LOW
from diagnose.protocol import PassResult
from diagnose.report.comparison import Interleaved
from diagnose.report.model import Report
from diagnose.session import Progress, Session
from diagnose.target import Target, sha256_of
from microbench.stats import AbbaRound, abba_summary

CONFIDENCE = 0.95
ORDER = ("before", "after", "after", "before")  # one round
RUNNABLE_SLACK_CPUS = 0.5  # schedstat's readings over a window of a few ms are that coarse


def waited_for_others(res: PassResult, usable: int) -> float | None:
    """The share of its runnable time a run's threads waited for a CPU that other processes held: at least
    EXTERNAL_WAIT_SHARE_LOW while no more of them were runnable than the usable CPUs. None: it did not, or no
    schedstat here."""
    s = res.scheduling
    if s is None or not res.wall_s:
        return None
    runnable = (s.run_s + s.wait_s) / res.wall_s
    share = s.wait_share
    return share if share >= EXTERNAL_WAIT_SHARE_LOW and runnable <= usable + RUNNABLE_SLACK_CPUS else None


@dataclass
class _Side:
    name: str  # "BEFORE" or "AFTER"
    target: Target
    config: Config
    cwd: str
    label: str  # "BEFORE (model.py)"
    session: Session | None = None
    workdir: str | None = None


def _side(name: str, report: Report) -> _Side:
    """How to run `report`'s target again as it ran, or UsageError with why it cannot be."""
    info, label = report.target, f"{name} ({report.target.script})"
    if info.mode == "attach":
        raise UsageError(f"compare --repeat: {label} is a report of an attached process, which diagnose cannot "
                         "start again; compare without --repeat")
    if report.distributed is not None:
        raise UsageError(f"compare --repeat: {label} is a torchrun job's report; its ranks are not re-run by "
                         "compare: compare without --repeat")
    if not (info.path and info.cwd and info.script_sha256):
        raise UsageError(f"compare --repeat: {label}'s report does not record its script's path and hash (an older "
                         "diagnose wrote it): diagnose it again to compare with --repeat")
    now = sha256_of(info.path)
    if now is None:
        raise UsageError(f"compare --repeat: {name}'s script {info.path} cannot be read any more")
    if now != info.script_sha256:
        raise UsageError(f"compare --repeat: {name}'s script {info.path} changed since its report was written, so "
                         "it cannot be run again as it was: keep each version in a file (or a git worktree) of its "
                         "own and diagnose each")
    if not os.path.isdir(info.cwd):
        raise UsageError(f"compare --repeat: {name}'s working directory {info.cwd} is gone")
    steps = report.steps
    config = Config(layers=(), skip_steps=info.warmup if info.function else (steps.skip_steps if steps else 0),
                    steps=info.iters if info.function else (steps.steps if steps else 1),
                    full_run=bool(steps and steps.full_run))
    return _Side(name, Target(script=info.path, argv=list(info.argv), function=info.function), config, info.cwd,
                 label)


def notes(before: Report, after: Report) -> list[str]:
    """What the re-runs cannot hold as it was when the reports were made."""
    out = [("the re-runs run each script file as it is now (its SHA-256 is unchanged); modules it imports are "
            "not checked")]
    here = machine.describe().threading_env
    for name, rep in (("BEFORE", before), ("AFTER", after)):
        if rep.machine.threading_env != here:
            out.append(f"{name} ran with thread settings {rep.machine.threading_env or 'unset'}; the re-runs use "
                       f"this shell's, {here or 'unset'}")
    return out


def run(before: Report, after: Report, rounds: int,
        on_run: Callable[[int, str, float | None, float | None], None] | None = None) -> Interleaved:
    """Both targets, `rounds` rounds of ORDER; `on_run(round, side, seconds or None, waited_for_others)` after
    each run. Ctrl-C propagates (nothing is written); a run that fails drops its round, a contended run too."""
    sides = {"before": _side("BEFORE", before), "after": _side("AFTER", after)}
    times: dict[str, list[float]] = {"before": [], "after": []}
    complete: list[AbbaRound] = []
    failed = contended = 0
    waits: list[float] = []
    usable = machine.usable_cpus()[0]
    try:
        for side in sides.values():
            side.workdir = tempfile.mkdtemp(prefix="diagnose-compare-")
            report = Report(target=replace(before.target if side.name == "BEFORE" else after.target))
            side.session = Session(side.target, side.config, report, side.workdir, True, Progress())
            side.session.cwd = side.cwd
        for key, side in sides.items():  # the warm-up run: not counted (module docstring)
            res = side.session.measure(f"{key}-warm-up")
            if on_run:
                on_run(0, side.name, None if isinstance(res, str) else res.median_s,
                       None if isinstance(res, str) else waited_for_others(res, usable))
            if isinstance(res, str):
                reason = res.strip().splitlines()[-1] if res.strip() else "no reason given"
                raise RerunError(f"compare --repeat: {side.label} failed when run again: {reason}")
        for r in range(1, rounds + 1):
            got: list[float | None] = []
            waited: list[float] = []
            for i, key in enumerate(ORDER):
                res = sides[key].session.measure(f"{key}-{r}-{i}")
                seconds = None if isinstance(res, str) else res.median_s
                wait = None if isinstance(res, str) else waited_for_others(res, usable)
                got.append(seconds)
                if wait is not None:
                    waited.append(wait)
                if on_run:
                    on_run(r, sides[key].name, seconds, wait)
            if any(s is None or s <= 0 for s in got):
                failed += sum(1 for s in got if s is None)
                continue
            if waited:
                contended += 1
                waits += waited
                continue
            b1, a1, a2, b2 = got  # ORDER: before, after, after, before
            times["before"] += [b1, b2]
            times["after"] += [a1, a2]
            complete.append(AbbaRound(a1=b1, b1=a1, b2=a2, a2=b2))  # microbench's A is BEFORE, its B is AFTER
    finally:
        for side in sides.values():
            if side.session is not None:
                side.session.close()
            if side.workdir:
                shutil.rmtree(side.workdir, ignore_errors=True)
    unit = "iteration" if before.run.iterations and before.run.iterations.n else "run"
    if not complete:
        return Interleaved(rounds=0, unit=unit, before_s=[], after_s=[], round_ratios=[], ratio=0.0, ci_low=None,
                           ci_high=None, confidence=None, drift_pct=0.0, failed=failed, contended=contended,
                           contended_wait_pct=_pct(waits), usable_cpus=usable, notes=notes(before, after))
    summary = abba_summary(complete, method="sign", confidence=CONFIDENCE, min_effect=0.0)
    return Interleaved(rounds=len(complete), unit=unit, before_s=[round(x, 9) for x in times["before"]],
                       after_s=[round(x, 9) for x in times["after"]],
                       round_ratios=[round(math.exp(x), 4) for x in summary.log_ratios],
                       ratio=round(summary.ratio, 4),
                       ci_low=None if summary.ci_low is None else round(summary.ci_low, 4),
                       ci_high=None if summary.ci_high is None else round(summary.ci_high, 4),
                       confidence=None if summary.confidence is None else round(summary.confidence, 4),
                       drift_pct=round(100 * summary.measured_floor, 2), failed=failed, contended=contended,
                       contended_wait_pct=_pct(waits), usable_cpus=usable, notes=notes(before, after))


def _pct(waits: list[float]) -> float | None:
    """The most a contended run waited, as a percentage of its runnable time."""
    return round(100 * max(waits), 1) if waits else None
