"""The doctor layer: environment checks after the passes, then the measured trials of their suggestions.

A derived layer (diagnose/doctor/ holds the checks and the trials). The
checks always run: they read what the passes already measured (page
faults, the process's maps and cgroup counters, the subnormal scan, the
thread recording's CPUs, the operator rows) and this machine's cpuinfo and
sysfs, so they cost nothing. Trials re-run the uninstrumented workload over
the same window of steps (diagnose/doctor/trials.py says how the sides start
alike): by default only for a check that warned, with `--doctor` every trial
this machine can run; and when the threads findings are raised from the
target's own intra-op count (findings/threads.configured_threads_fix), a
one-point trial of the recommended count, which those findings' stake reads.
While the threads wait for CPUs (oversubscription), only the trials that
answer it run; the others are listed as deferred (trials.defer).
"""

from __future__ import annotations

import shlex

from diagnose.config import TrialOptions
from diagnose.doctor import checks as run_checks
from diagnose.doctor import trials as trials_mod
from diagnose.findings.threads import configured_threads_fix, oversubscribed
from diagnose.layers.base import DerivedContext, Layer
from diagnose.report.model import Doctor, LayerStatus, Report


def command_line(report: Report) -> str:
    """How the user launched the target, for launch lines."""
    t = report.target
    script = f"{t.script}:{t.function}" if t.mode == "function" else t.script
    prefix = "diagnose" if t.mode == "function" else "python"
    return " ".join(shlex.quote(x) for x in [prefix, script, *t.argv])


class DoctorLayer(Layer):
    name = "doctor"
    long_window = True
    compares_reruns = True
    description = "environment checks (allocator, page faults, denormals, OpenMP, quota, topology) and trials"
    derived = True
    options = ("trials", TrialOptions)  # the what-if layer's trials read them too

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        doctor = report.doctor or Doctor()
        report.doctor = doctor
        doctor.checks = run_checks(report)
        status = LayerStatus("ok")
        if doctor.process is None:
            status.notes.append("the uninstrumented pass wrote no process readings: the checks on them are skipped")
        command = command_line(report)
        variants, notes = trials_mod.variants_for(doctor.checks, command, every=context.config.doctor,
                                                  quota_cpus=report.machine.cgroup_cpu_limit)
        status.notes += notes
        fix = configured_threads_fix(report)
        if fix is not None:  # undersubscription / oversubscription from the target's own thread count
            variants.append(trials_mod.thread_count_variant(*fix))
        variants, deferred = trials_mod.defer(variants, oversubscribed(report))
        doctor.trials = deferred  # listed with their reason; findings/doctor.py keeps their checks' findings low
        if not variants:
            return status
        if context.rerun is None or report.run.interrupted:
            status.notes.append("no trial ran: the workload cannot be re-run from here")
            return status
        total = trials_mod.ROUNDS * (len(variants) + 1)
        run = trials_mod.Counted(context.rerun, total, context.on_trial)
        ran = trials_mod.run_trials(variants, run, more=run.more, extended=context.config.trials.rounds,
                                    unchanged=lambda v: trials_mod.no_effect(v.check, doctor.checks),
                                    one_per_check=True)  # a check's changes are alternatives (allocators)
        doctor.trials = ran + deferred
        doctor.baselines = run.baselines
        if doctor.baselines:  # the page-fault check reads its share over them too (doctor/workload.py)
            doctor.checks = run_checks(report)
        doctor.launch = trials_mod.launch_line(doctor.trials, command)
        return status
