"""--repeat N: the uninstrumented workload N times in all, for run-to-run drift.

One run's steps say how much steps vary inside a run (IQR/median); they say nothing about how much a whole
run's median moves from one run to the next on a shared machine (the CPU's clock, a neighbour's load, where
the heap landed). `diagnose compare` needs that to call a regression: two single runs of the same script
measured 20% apart with a within-run floor of 13%. This layer re-runs the uninstrumented workload N - 1 times
over the same window, each forked from the fork server like a sweep point, and keeps each run's median in
report.run.repeats; the first run is the baseline pass's.
"""

from __future__ import annotations

import statistics

from diagnose.config import RepeatOptions
from diagnose.layers.base import DerivedContext, Layer
from diagnose.protocol import Overrides
from diagnose.report.model import LayerStatus, Repeats, Report


def spread_pct(medians: list[float]) -> float | None:
    """(slowest - fastest) / median of the runs' medians, in percent; None under two runs."""
    if len(medians) < 2:
        return None
    mid = statistics.median(medians)
    return round(100 * (max(medians) - min(medians)) / mid, 2) if mid > 0 else None


class RepeatLayer(Layer):
    name = "repeat"
    long_window = True
    description = "the uninstrumented workload again, unchanged, for run-to-run drift"
    derived = True
    options = ("repeat", RepeatOptions)

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        it = report.run.iterations
        first = it.median_s if it and it.n else report.run.wall_s  # as PassResult.measured_s: steps, else the run
        if not first:
            return LayerStatus("skipped", "the first run measured no time to repeat")
        if context.rerun is None:
            return LayerStatus("skipped", "the workload cannot be re-run from here")
        unit = "run" if not (it and it.n) else "call" if report.target.function else "step"
        repeats = report.run.repeats = Repeats(unit=unit, medians_s=[first])
        runs = context.config.repeat.runs
        for i in range(2, runs + 1):
            if context.on_trial:
                context.on_trial(i - 1, runs - 1, "repeat", f"run {i} of {runs}")
            out = context.rerun(f"repeat-{i}", {}, Overrides())
            if isinstance(out, str) or out.median_s is None:
                repeats.failed += 1
                continue
            repeats.medians_s.append(round(out.median_s, 9))
        repeats.spread_pct = spread_pct(repeats.medians_s)
        if len(repeats.medians_s) < 2:
            return LayerStatus("failed", f"none of the {runs - 1} re-run(s) measured a time")
        return LayerStatus("ok")
