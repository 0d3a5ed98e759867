"""Facts about this machine that bound what a workload can use: report.machine.

The readings (CPU model and flags, cgroup quota, usable CPUs) live in
microbench/machine.py, which diagnose and the standalone microbench share.
Usable CPUs = min(affinity, cgroup quota), never `os.cpu_count()`: containers
with a quota still show every host core (docs/measurements.md).
"""

from __future__ import annotations

import os
import platform

from diagnose.report.model import Machine
from microbench.machine import (  # noqa: F401 - the readings, shared with microbench (which never imports diagnose)
    THREADING_ENV,
    VECTOR_FLAG,
    cgroup_cpu_limit,
    cpu_flags,
    cpu_model,
    own_cgroup_dirs,
    read_cpu_flags,
    vector_isa,
)
from microbench.machine import cpu_limits as usable_cpus  # (usable, affinity, cgroup limit)


def describe(env: dict[str, str] | None = None) -> Machine:
    env = os.environ if env is None else env
    usable, affinity, limit = usable_cpus()
    return Machine(
        cpu_model=cpu_model(),
        logical_cpus=os.cpu_count() or 1,
        usable_cpus=usable,
        affinity_cpus=affinity,
        cgroup_cpu_limit=limit,
        threading_env={k: env[k] for k in THREADING_ENV if k in env},
        python_version=platform.python_version(),
        platform=platform.platform(),
    )
