"""diagnose(target, config) -> Result: plan, run the passes, derive, judge, write.

Pass 1 runs the target uninstrumented (its output goes to the terminal, its
wall time is the reference); each layer with a recorder then gets a pass of
its own; derived layers come after (diagnose/session.py). Whatever happens to
a pass, the report is written with what was measured; the exit code says how
the target fared.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from diagnose import __version__, budget, findings, machine, output, target as target_mod
from diagnose.config import Config
from diagnose.distributed import view as distributed_view
from diagnose.errors import ExitCode
from diagnose.report.model import Report, TargetInfo
from diagnose.session import Plan, Progress, Session
from diagnose.target import Target

NullProgress = Progress  # says nothing: for scripts and tests (`diagnose -q`)


@dataclass
class Result:
    report: Report
    output_dir: str
    exit_code: ExitCode


def exit_code_for(report: Report) -> ExitCode:
    if report.run.interrupted:
        return ExitCode.INTERRUPTED
    if report.run.error or report.run.exit_code or report.run.timed_out:
        return ExitCode.TARGET_FAILED
    return ExitCode.OK


def diagnose(target: Target, config: Config, progress: Progress | None = None) -> Result:
    target_mod.validate(target)
    output_dir = config.output_dir or output.default_output_dir(target.stem, config.reports_root)
    created = not os.path.exists(output_dir)
    output.prepare_output_dir(output_dir, config.force)
    report = Report(
        target=TargetInfo(script=target.script, argv=list(target.argv), mode=target.mode, function=target.function,
                          warmup=config.skip_steps if target.function else None,
                          iters=config.steps if target.function else None, path=target.path, cwd=os.getcwd(),
                          script_sha256=target_mod.sha256_of(target.path)),
        machine=machine.describe(),
    )
    report.run.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report.run.diagnose_version = __version__
    session = Session(target, config, report, output_dir, created, progress or Progress())
    if session.distributed:  # a torchrun job: per-rank results go to report.distributed
        report.distributed = distributed_view.start(session.distributed)
    try:
        session.run(Plan.of(config, report))
        if report.distributed:
            distributed_view.finish(report)
        report.step_budget = budget.of(report)
        findings.judge(report)
        output.write_report(report, output_dir)
    finally:
        session.close()
    return Result(report=report, output_dir=output_dir, exit_code=exit_code_for(report))
