"""What the results file says about the machine that produced it, and the machine readings diagnose shares.

Usable CPUs = min(affinity, cgroup CPU quota), never `os.cpu_count()`
(containers with a quota still show every host core). Read when a run starts,
never at import.

`cpu_snapshot()` / `others_cpus()` measure what other processes took from the
machine during a measurement (/proc/stat busy time minus our own CPU time;
hypervisor steal counts as others). /proc/stat ticks are 10 ms, so a
measurement shorter than ~0.2 s gets a coarse estimate.
"""

from __future__ import annotations

import math
import os
import platform
import re
import time
from dataclasses import dataclass

# The machine readings for the whole project (diagnose.machine builds its typed description from them).

THREADING_ENV = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "OMP_PLACES", "OMP_SCHEDULE",
    "GOMP_SPINCOUNT", "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_HW_SUBSET",
    "MKL_DYNAMIC", "LD_PRELOAD", "TORCH_NUM_INTEROP_THREADS",
)


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo_text: str) -> set[str]:
    """Instruction-set flags of the first CPU in /proc/cpuinfo (`flags`; `Features` on Arm)."""
    for key in ("flags", "Features"):
        for line in cpuinfo_text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key:
                return set(value.split())
    return set()


VECTOR_FLAG = re.compile(r"^(avx|amx|fma|sse4|asimd|sve|neon)")


def read_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """This machine's instruction-set flags (empty when cpuinfo cannot be read)."""
    try:
        with open(cpuinfo) as fh:
            return cpu_flags(fh.read())
    except OSError:
        return set()


def vector_isa(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vector instruction sets (avx2, avx512f, amx_bf16, ...), sorted and comma-joined: what a
    measured peak depends on beyond the model name, which VMs often report only as "AMD EPYC"."""
    return ",".join(sorted(f for f in read_cpu_flags(cpuinfo) if VECTOR_FLAG.match(f)))


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup", proc_self_cgroup: str = "/proc/self/cgroup") -> float | None:
    """CPUs allowed by the cgroup CPU quota, or None when there is no quota."""
    for version, folder in own_cgroup_dirs(root, proc_self_cgroup):
        if version == 2:  # cpu.max = "max 100000" or "200000 100000"
            limit = _read_cpu_max(os.path.join(folder, "cpu.max"))
            if limit is not None:
                return limit
        else:  # cpu.cfs_quota_us and cpu.cfs_period_us
            quota = _read_int(os.path.join(folder, "cpu.cfs_quota_us"))
            period = _read_int(os.path.join(folder, "cpu.cfs_period_us"))
            if quota and period and quota > 0:
                return quota / period
    return None


V1_CPU_CONTROLLERS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def own_cgroup_dirs(root: str = "/sys/fs/cgroup", proc_self_cgroup: str = "/proc/self/cgroup",
                    v1_controllers: tuple[str, ...] = V1_CPU_CONTROLLERS) -> list[tuple[int, str]]:
    """Folders that may hold the calling process's own cgroup files, most likely first: (version, folder).

    v2 (unified): <root>/<path>, then <root>/unified/<path> (the hybrid layout), then those roots;
    v1: <root>/<controller>/<path> for each name the controller's hierarchy may be mounted under, then
    that root. The roots come after the paths because inside a container without a cgroup namespace
    /proc/self/cgroup gives the host's path while the container sees its own cgroup at the root.
    """
    paths = _own_cgroup_paths(proc_self_cgroup)
    out: list[tuple[int, str]] = []
    for base in ("", "unified"):
        for rel in paths.get("", []) + [""]:
            out.append((2, os.path.join(root, base, rel.lstrip("/"))))
    for ctrl in v1_controllers:
        for rel in paths.get(ctrl, []) + [""]:
            out.append((1, os.path.join(root, ctrl, rel.lstrip("/"))))
    seen: set[tuple[int, str]] = set()
    return [d for d in out if not (d in seen or seen.add(d))]


def _own_cgroup_paths(proc_self_cgroup: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    try:
        with open(proc_self_cgroup) as fh:
            for line in fh:
                parts = line.strip().split(":", 2)
                if len(parts) == 3:
                    for ctrl in parts[1].split(",") if parts[1] else [""]:
                        out.setdefault(ctrl, []).append(parts[2])
                    if parts[1]:
                        out.setdefault(parts[1], []).append(parts[2])
    except OSError:
        pass
    return out


def _read_cpu_max(path: str) -> float | None:
    try:
        with open(path) as fh:
            quota, _, period = fh.read().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not period:
        return None
    try:
        return int(quota) / int(period)
    except ValueError:
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def cpu_limits() -> tuple[int, int, float | None]:
    """(usable, affinity, cgroup limit): usable = min of the two, at least 1."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    usable = affinity if limit is None else max(1, min(affinity, math.ceil(limit)))
    return usable, affinity, limit


def usable_cpus() -> int:
    return cpu_limits()[0]


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
