"""What the results file says about the machine that produced it.

Usable CPUs = min(affinity, cgroup CPU quota), never `os.cpu_count()`
(containers with a quota still show every host core). Read when a run starts,
never at import.

`cpu_snapshot()` / `others_cpus()` measure what other processes took from the
machine during a measurement (/proc/stat busy time minus our own CPU time;
hypervisor steal counts as others). /proc/stat ticks are 10 ms, so a
measurement shorter than ~0.2 s gets a coarse estimate.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

# One reading of the machine for the whole project: diagnose.machine (affinity, the cgroup v1/v2
# quota of this process's own cgroup, the threading variables worth recording).
from diagnose.machine import THREADING_ENV, cpu_model  # noqa: F401 - cpu_model is part of this API
from diagnose.machine import usable_cpus as _reading


def usable_cpus() -> int:
    return _reading()[0]


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    busy_s: float | None      # CPU-seconds busy on the whole machine (incl. steal), None if unreadable
    own_s: float              # CPU-seconds used by this process (all threads)


def cpu_snapshot(stat: str = "/proc/stat") -> CpuSnapshot:
    busy = None
    try:
        with open(stat) as fh:
            fields = [int(x) for x in fh.readline().split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    t = os.times()
    return CpuSnapshot(time.perf_counter(), busy, t.user + t.system)


def others_cpus(before: CpuSnapshot, after: CpuSnapshot) -> float | None:
    """CPUs used on average by everything but this process between two snapshots (incl. hypervisor steal)."""
    wall = after.wall_s - before.wall_s
    if before.busy_s is None or after.busy_s is None or wall <= 0:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / wall)


def describe() -> dict:
    """Machine facts for the results file (imports torch)."""
    import torch

    backend = None
    for line in torch.__config__.parallel_info().splitlines():
        if line.startswith("ATen parallel backend:"):
            backend = line.split(":", 1)[1].strip()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count() or 1,
        "usable_cpus": usable_cpus(),
        "torch_version": torch.__version__,
        "parallel_backend": backend,
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "threading_env": {k: os.environ[k] for k in THREADING_ENV if k in os.environ},
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
