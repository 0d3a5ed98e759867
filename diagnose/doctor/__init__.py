"""The environment doctor: what the process runs on and how the workload uses memory and the CPU, each
check with its readings, and the changes that can be tried from outside measured on the user's own steps.

- `environment`: pure readers of /proc, sysfs and cgroup files, and the checks on them (OpenMP and BLAS
  runtimes, CPU quota, topology, low precision without hardware support);
- `process`: the readings taken inside the target by the uninstrumented pass (maps, cpu.stat, a scan for
  subnormal values);
- `workload`: the checks on what the workload did (page faults with the allocator, subnormal values);
- `trials`: interleaved A/B passes of the workload with one change (allocator, flush_denormal).

`checks(report)` runs every check on a report (pure: it re-runs on a loaded report);
diagnose/layers/doctor.py runs them after the passes and then the trials.
"""

from __future__ import annotations

import os

from diagnose.doctor import environment as env_checks
from diagnose.doctor.workload import check_denormals, check_page_faults
from diagnose.machine import read_cpu_flags
from diagnose.report.model import DoctorCheck, Report


def _op_dtypes(report: Report) -> dict[str, float]:
    shares: dict[str, float] = {}
    for row in report.operators:
        dtype = next((d for d in row.dtypes if d), None)
        if dtype:
            shares[dtype] = shares.get(dtype, 0.0) + row.self_pct
    return shares


def checks(report: Report, cpuinfo: str = "/proc/cpuinfo", sys_root: str = "/sys") -> list[DoctorCheck]:
    """Every doctor check on the report (and this machine's cpuinfo and sysfs: the machine it ran on)."""
    process = report.doctor.process if report.doctor else None
    busy_threads = report.threads.busy_threads if report.threads else []
    out = [check_page_faults(report), check_denormals(report)]
    if process is None:
        out += [DoctorCheck(name, "skipped", "The uninstrumented pass wrote no process readings.")
                for name in ("openmp_runtimes", "blas_threads", "cpu_quota")]
    else:
        runtimes = env_checks.classify(process.libraries)
        threading_env = report.machine.threading_env
        out.append(env_checks.check_openmp_runtimes(runtimes, threading_env))
        pools = [process.blas_pools[lib.path] for lib in runtimes.blas
                 if lib.owner != "torch" and lib.path in process.blas_pools]
        out.append(env_checks.check_blas_threads(runtimes, threading_env, report.machine.usable_cpus,
                                                 report.machine.intra_op_threads, any(pools) if pools else None))
        busy = sum(t.cpu_used or 0.0 for t in busy_threads) or None
        out.append(env_checks.check_cpu_quota(process.cpu_stat_before, process.cpu_stat_after,
                                              report.run.wall_s or 0.0, busy, report.machine.cgroup_cpu_limit,
                                              source=process.cpu_stat_path or "cgroup cpu.stat"))
    # more busy threads than CPUs must move between them: that is oversubscription (the threads findings),
    # not a placement the topology check could fix, so migrations are judged only when the threads fit
    fits = bool(busy_threads) and len(busy_threads) <= max(1, report.machine.usable_cpus)
    out.append(env_checks.check_topology(
        env_checks.read_topology(sys_root),
        {t.tid: t.cpus for t in busy_threads if t.cpus},
        sum(t.cpu_changes for t in busy_threads) if fits else None,
        sum(max(0, t.cpu_samples - 1) for t in busy_threads) if fits else None,
        sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None))
    out.append(env_checks.check_low_precision(read_cpu_flags(cpuinfo), _op_dtypes(report)))
    return out
