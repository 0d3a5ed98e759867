"""The microbench layer: the top operators measured alone, at their shapes, across thread counts.

A derived layer: after the passes it hands the report's operator rows to the
`microbench` package (`python -m microbench from-report`, its own process:
torch.utils.benchmark changes the thread count, which must not happen in the
orchestrator) with a time budget, and puts its measurements into
`report.microbenchmarks` (microbench's rows as MicrobenchRow) and a standalone
reproducer script per operator into `reproducers/`. The `sequential_operator`
finding reads those rows (diagnose/findings/microbench.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from diagnose.config import MicrobenchOptions
from diagnose.findings.suggestions import weight_init_row
from diagnose.layers.base import DerivedContext, Layer, last_line, run_helper
from diagnose.report import io as report_io
from diagnose.report.model import LayerStatus, MicrobenchRow, Report



REPRODUCERS = "reproducers"
# each measurement stops when IQR/median < 10% or after this long (microbench's own default is 2 s): on a
# noisy host the adaptive loop rarely converges, and a second of blocks already pins the median that the
# findings read; the IQR shown beside it says how noisy the host was
MAX_RUN_TIME_S = 1.0
START_UP_ALLOWANCE_S = 60.0  # beyond the budget: interpreter and torch start-up, the last measurement


class MicrobenchLayer(Layer):
    name = "microbench"
    description = "micro-benchmarks of the top operators at their recorded shapes, across thread counts"
    derived = True
    options = ("microbench", MicrobenchOptions)

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        budget, top = context.config.microbench.budget_s, context.config.microbench.top
        if budget <= 0:
            return LayerStatus("skipped", "--microbench-budget 0 turned it off")
        if not report.operators:
            return LayerStatus("skipped", "the operator pass recorded no operators to benchmark")
        source = os.path.join(workdir, "operators.json")
        # weight initialisation during set-up is not the loop's work: never a suspect to benchmark
        init = [op for op in report.operators if weight_init_row(report, op)]
        report_io.save(dataclasses.replace(report, operators=[op for op in report.operators if op not in init])
                       if init else report, source)
        out = os.path.join(workdir, "microbench.json")
        cmd = [sys.executable, "-m", "microbench", "from-report", source, "--top", str(top),
               "--budget", f"{budget:g}", "--max-run-time", f"{MAX_RUN_TIME_S:g}", "--json", out,
               "--reproducers", os.path.join(workdir, REPRODUCERS), "-q"]
        log_path = os.path.join(workdir, "microbench.log")
        code, _ = run_helper(cmd, log_path, budget + START_UP_ALLOWANCE_S, context.tick,
                             server=context.server)
        if not os.path.exists(out):
            how = f"exit code {code}" if code is not None else f"stopped after {budget + START_UP_ALLOWANCE_S:g} s"
            return LayerStatus("failed", f"microbench wrote no results ({how}): {last_line(log_path)}")
        with open(out) as fh:
            data = json.load(fh)
        rows = [report_io.typed(MicrobenchRow, row) for row in data.get("measurements") or []]
        for row in rows:
            if row.reproducer:
                row.reproducer = f"{REPRODUCERS}/{os.path.basename(row.reproducer)}"
        report.microbenchmarks = rows
        status = LayerStatus("ok" if rows else "failed", None if rows else "no operator could be benchmarked")
        status.notes += list(data.get("notes") or [])
        for op in init:
            status.notes.append(f"{op.name} {op.input_shapes}: not benchmarked (weight initialisation during set-up, "
                                "not the loop's work)")
        for s in data.get("skipped") or []:
            status.notes.append(f"{s.get('op')} {s.get('input_shapes')}: not benchmarked ({s.get('reason')})")
        if os.path.isdir(os.path.join(workdir, REPRODUCERS)) and rows:
            report.artifacts["reproducers"] = REPRODUCERS
        return status
