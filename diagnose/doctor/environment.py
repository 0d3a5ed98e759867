"""Readers of the environment a process runs in, and the doctor's checks that need no running process.

Readers are pure parsers (text in, data out) plus thin wrappers that take a root path (`/proc`,
`/sys`, `/sys/fs/cgroup`) so tests point them at a recorded tree (tests/data/doctor/). Checks take
those readings and return a `DoctorCheck`: "ok", "warn" (with a suggestion) or "skipped" (the
summary says why), with every reading behind the verdict as a `Fact`.

What a maps file shows on this project's machine (torch 2.13.0+cpu, x86-64 pip wheel): torch maps
one OpenMP runtime, its own GNU copy `torch/lib/libgomp.so.1`, and no BLAS file: its MKL is linked
into libtorch_cpu.so. `import torch` imports numpy when it is installed, so a plain torch process
also maps numpy's OpenBLAS (`numpy.libs/libscipy_openblas64_-*.so`), which starts its pool of
usable-CPUs - 1 threads at load; the maps are the same whether numpy then does any linear algebra
or not, so `check_blas_threads` needs another sign (`blas_busy`) to tell the two apart.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from diagnose.machine import own_cgroup_dirs
from diagnose.report.model import DoctorCheck, Fact

# ---------------------------------------------------------------- thresholds

# Share of the sampled intervals in which a busy thread was found on another CPU than at the previous
# sample. A pool bound with OMP_PROC_BIND stays near 0; the scheduler's load balancing of an unbound
# pool moves threads now and then. 20% is a working value (not calibrated on a measured cost): above it
# a thread changes CPU in one interval out of five, which leaves its L1/L2 (and across NUMA nodes,
# its memory) behind that often.
MIGRATION_SHARE_MAX = 0.20
# Fewer sampled intervals than this say nothing about how often threads move (two threads over a
# half-second window give a handful). And migrations are judged only where placement matters: with SMT
# siblings or several NUMA nodes. On one node without SMT a move costs L1/L2 refills only; on this
# project's 2-CPU machine two busy threads swapped CPUs in most intervals and binding them gained
# nothing (1.02x, measured by the bind_threads trial on examples/mlp.py).
MIGRATION_MIN_SAMPLES = 20

# Share of operator time in a low-precision dtype below which emulation is not worth a warning: even if
# the emulated operators ran twice as slow as fp32, under 1% of the operator time could not be told
# from run-to-run noise (a few %, benchmarks/RESULTS.md).
LOW_PRECISION_MIN_SHARE_PCT = 1.0

# ---------------------------------------------------------------- /proc/PID/maps


def loaded_libraries(maps_text: str) -> list[str]:
    """Unique shared-object paths mapped in a /proc/PID/maps text, in first-seen order.

    A maps line is `start-end perms offset dev inode [path]`; the path may hold spaces and ends in
    " (deleted)" when the file was replaced on disk after it was mapped.
    """
    seen: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip().removesuffix(" (deleted)")
        if path.startswith("/") and _is_shared_object(os.path.basename(path)):
            seen.setdefault(path, None)
    return list(seen)


def _is_shared_object(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


@dataclass
class Library:
    """One runtime library mapped in the process."""

    name: str  # "GNU", "Intel", "LLVM" (OpenMP); "openblas", "mkl", "blis" (BLAS)
    path: str
    owner: str | None  # the Python package shipping it ("torch", "numpy", "scikit_learn"), None: system


@dataclass
class Runtimes:
    """The allocator, OpenMP runtimes and BLAS libraries a process has mapped."""

    allocator: str = "glibc"  # "glibc", "jemalloc", "tcmalloc", "mimalloc"
    allocator_path: str | None = None  # None for glibc's malloc
    openmp: list[Library] = field(default_factory=list)  # each a pool of its own, unless one serves the rest
    blas: list[Library] = field(default_factory=list)  # one per library folder (MKL is several files)


# basename patterns; a wheel may rename its copy with a hash (auditwheel): libgomp-a34b3233.so.1
_ALLOCATORS = (("jemalloc", re.compile(r"^libjemalloc\b")), ("tcmalloc", re.compile(r"^libtcmalloc")),
               ("mimalloc", re.compile(r"^libmimalloc\b")))
_OPENMP = (("GNU", re.compile(r"^libgomp([-.]|$)")), ("Intel", re.compile(r"^libiomp5(md)?([-.]|$)")),
           ("LLVM", re.compile(r"^libomp([-.]|$)")))
_BLAS = (("openblas", re.compile(r"^lib(scipy_)?openblas")), ("mkl", re.compile(r"^libmkl_")),
         ("blis", re.compile(r"^libblis")))
# which OpenMP entry points each runtime exports: Intel's and LLVM's also serve GNU's GOMP_* calls
_OPENMP_APIS = {"GNU": {"GOMP"}, "Intel": {"GOMP", "KMP"}, "LLVM": {"GOMP", "KMP"}}


def _owner(path: str) -> str | None:
    """The package folder under site-packages (or dist-packages) holding a library; `numpy.libs` -> numpy."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-2]):
        if part in ("site-packages", "dist-packages"):
            return parts[i + 1].removesuffix(".libs")
    return None


def classify(paths: list[str]) -> Runtimes:
    """Name the allocator, the OpenMP runtimes and the BLAS libraries among mapped library paths."""
    out = Runtimes()
    blas_folders: set[tuple[str, str]] = set()
    for path in paths:
        base = os.path.basename(path)
        for name, pattern in _ALLOCATORS:
            if pattern.search(base) and out.allocator_path is None:
                out.allocator, out.allocator_path = name, path
        for name, pattern in _OPENMP:
            if pattern.search(base):
                out.openmp.append(Library(name, path, _owner(path)))
        for name, pattern in _BLAS:
            if pattern.search(base) and (name, os.path.dirname(path)) not in blas_folders:
                blas_folders.add((name, os.path.dirname(path)))
                out.blas.append(Library(name, path, _owner(path)))
    return out


# ---------------------------------------------------------------- cgroup cpu.stat


@dataclass
class CpuStat:
    """A cgroup's cpu.stat as cgroup v2 names it (v1's throttled_time, ns, becomes throttled_usec)."""

    path: str  # file(s) read; "a + b" when throttling came from v1 and usage from v2 (hybrid layout)
    values: dict[str, int]


def cgroup_cpu_stat(text: str) -> dict[str, int]:
    """`key value` lines of a cpu.stat (v2: nr_periods, nr_throttled, throttled_usec, usage_usec, ...)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value.strip())
        except ValueError:
            continue
    return out


def _v1_to_v2(values: dict[str, int]) -> dict[str, int]:
    out = dict(values)
    for v1, v2 in (("throttled_time", "throttled_usec"), ("burst_time", "burst_usec")):
        if v1 in out and v2 not in out:
            out[v2] = out.pop(v1) // 1000  # v1 counts nanoseconds
    return out


def read_own_cpu_stat(root: str = "/sys/fs/cgroup", proc_self_cgroup: str = "/proc/self/cgroup") -> CpuStat | None:
    """cpu.stat of the calling process's own cgroup, None when there is none to read.

    The file with throttling counters (nr_periods) wins. On a hybrid layout v2's unified tree has a
    cpu.stat with usage only (the cpu controller sits in v1): its usage is kept beside v1's counters.
    """
    usage_only: CpuStat | None = None
    for version, folder in own_cgroup_dirs(root, proc_self_cgroup):
        path = os.path.join(folder, "cpu.stat")
        try:
            with open(path) as fh:
                values = cgroup_cpu_stat(fh.read())
        except OSError:
            continue
        if version == 1:
            values = _v1_to_v2(values)
        if "nr_periods" in values:
            if usage_only is not None:
                merged = {**usage_only.values, **values}
                return CpuStat(f"{path} + {usage_only.path}", merged)
            return CpuStat(path, values)
        if usage_only is None and values:
            usage_only = CpuStat(path, values)
    return usage_only


# ---------------------------------------------------------------- sysfs topology


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-1,4", "3", "") as sorted CPU numbers."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


@dataclass
class Topology:
    """Logical CPUs with their SMT siblings, and NUMA nodes with their CPUs."""

    siblings: dict[int, list[int]]  # CPU -> the CPUs of its core, itself included
    nodes: dict[int, list[int]]  # node -> its CPUs; {0: every CPU} when sysfs has no node folders

    @property
    def cores(self) -> list[tuple[int, ...]]:
        """Distinct physical cores, each the tuple of its logical CPUs."""
        return sorted({tuple(s) for s in self.siblings.values()})

    @property
    def smt(self) -> bool:
        return any(len(s) > 1 for s in self.siblings.values())

    def node_of(self, cpu: int) -> int | None:
        for node, cpus in self.nodes.items():
            if cpu in cpus:
                return node
        return None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _numbered(folder: str, prefix: str) -> list[int]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(n[len(prefix):]) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())


def read_topology(sys_root: str = "/sys") -> Topology:
    """Topology from sysfs; an offline CPU (no topology folder) is left out, a missing node folder means one node."""
    cpu_dir = os.path.join(sys_root, "devices/system/cpu")
    siblings: dict[int, list[int]] = {}
    for cpu in _numbered(cpu_dir, "cpu"):
        text = _read(os.path.join(cpu_dir, f"cpu{cpu}", "topology", "thread_siblings_list"))
        if text is not None:
            siblings[cpu] = parse_cpu_list(text) or [cpu]
    node_dir = os.path.join(sys_root, "devices/system/node")
    nodes: dict[int, list[int]] = {}
    for node in _numbered(node_dir, "node"):
        text = _read(os.path.join(node_dir, f"node{node}", "cpulist"))
        if text is not None and parse_cpu_list(text):
            nodes[node] = parse_cpu_list(text)
    if not nodes:
        nodes = {0: sorted(siblings)}
    return Topology(siblings=siblings, nodes=nodes)


# ---------------------------------------------------------------- checks


def _preloaded(path: str, preload: str) -> bool:
    """Whether LD_PRELOAD (space- or colon-separated paths or names) names this library."""
    names = [p for p in re.split(r"[\s:]+", preload) if p]
    return any(p == path or os.path.basename(p) == os.path.basename(path) for p in names)


def _describe(lib: Library) -> str:
    return f"{lib.name} ({lib.owner}'s copy, {lib.path})" if lib.owner else f"{lib.name} ({lib.path})"


def check_openmp_runtimes(runtimes: Runtimes, env: dict[str, str] | None = None) -> DoctorCheck:
    """Warn when more than one OpenMP runtime (or two copies of one) can each start a pool of threads.

    Each copy keeps its own pool, sized to the usable CPUs unless told otherwise: two pools busy at
    once put twice as many threads as CPUs on the run queues. A runtime named in LD_PRELOAD is an
    exception: it comes first in symbol lookup, so it serves the entry points it exports for every
    library (Intel's and LLVM's runtimes also export GNU's GOMP_* calls; that is how
    `LD_PRELOAD=libiomp5.so` moves torch's libgomp calls to Intel OpenMP): the copies it serves
    stay mapped but idle.
    """
    preload = (env or {}).get("LD_PRELOAD", "")
    facts = [Fact("OpenMP runtime", _describe(lib), "", "/proc/PID/maps") for lib in runtimes.openmp]
    if preload:
        facts.append(Fact("LD_PRELOAD", preload, "", "environment"))
    serving = [lib for lib in runtimes.openmp if preload and _preloaded(lib.path, preload)]
    pools = [lib for lib in runtimes.openmp if lib in serving or not any(
        _OPENMP_APIS[lib.name] <= _OPENMP_APIS[s.name] for s in serving)]
    facts.append(Fact("OpenMP thread pools", len(pools), "", "/proc/PID/maps"))
    if not runtimes.openmp:
        return DoctorCheck("openmp_runtimes", "ok", "No OpenMP runtime is loaded.", facts)
    if len(pools) <= 1:
        served = len(runtimes.openmp) - len(pools)
        summary = f"One OpenMP runtime: {_describe(pools[0])}" + (
            f"; preloaded, it also serves the {served} other cop{'y' if served == 1 else 'ies'} mapped." if served
            else ".")
        return DoctorCheck("openmp_runtimes", "ok", summary, facts)
    listed = ", ".join(_describe(lib) for lib in pools)
    kinds = {lib.name for lib in pools}
    if len(kinds) == 1:
        summary = (f"{len(pools)} copies of {pools[0].name} OpenMP are loaded: {listed}. Each starts its own "
                   f"pool of threads, so their busy threads together oversubscribe the CPUs.")
    else:
        summary = (f"{len(pools)} OpenMP runtimes are loaded: {listed}. Each may start its own pool of threads, "
                   f"so their busy threads together oversubscribe the CPUs.")
    others = [lib for lib in pools if lib.owner != "torch"]
    other_names = ", ".join(lib.owner or os.path.basename(lib.path) for lib in others) or "the other copy"
    suggestion = (f"Load one OpenMP runtime: drop what loads {other_names} (a library in LD_PRELOAD, or a package "
                  f"built against another OpenMP), or preload one runtime that serves all of them "
                  f"(LD_PRELOAD=<path of libiomp5.so or libgomp.so.1>); otherwise keep the other pool to one "
                  f"thread while torch computes: threadpoolctl.threadpool_limits(1, user_api='openmp') around the "
                  f"other library's calls.")
    if any(lib.name == "Intel" for lib in pools):
        suggestion += (" If libiomp5 was preloaded on purpose (Intel OpenMP for torch), check that LD_PRELOAD "
                       "names that exact file.")
    return DoctorCheck("openmp_runtimes", "warn", summary, facts, suggestion=suggestion)


# thread-count variables each BLAS reads, in its order of precedence
BLAS_THREAD_VARS = {
    "openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
    "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
}


def _first_count(value: str) -> int | None:
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else None


BLAS_CHECK = "blas_threads"
BLAS_VARIABLE_FACT = "thread variable to set"


def check_blas_threads(runtimes: Runtimes, env: dict[str, str], usable_cpus: int, torch_threads: int | None,
                       blas_busy: bool | None = None) -> DoctorCheck:
    """Warn when a BLAS besides torch's own runs a full pool of threads beside torch's.

    torch's pip wheels link their BLAS (MKL on x86) into libtorch_cpu.so; a BLAS file shipped with
    torch (torch/lib, torch.libs) is torch's too. Any other (numpy's OpenBLAS, a system MKL) sizes
    its pool from its variable, else from the usable CPUs. `import torch` imports numpy, so numpy's
    OpenBLAS is mapped in every torch process where numpy is installed, with its pool idle unless
    numpy or scipy does linear algebra: `blas_busy` says whether that pool was started in the run, so
    threaded BLAS work ran (True), was not (False) or is not known (None: not a forked pass, see
    diagnose/doctor/process.py blas_pools). Only a busy pool with an unset variable warns.
    """
    separate = [lib for lib in runtimes.blas if lib.owner != "torch"]
    facts = [Fact("usable CPUs", usable_cpus, "CPUs", "affinity and cgroup quota")]
    if torch_threads is not None:
        facts.append(Fact("torch intra-op threads", torch_threads, "threads", "torch.get_num_threads()"))
    for lib in runtimes.blas:
        facts.append(Fact("BLAS library", f"{lib.name} ({lib.owner or 'system'}): {lib.path}", "", "/proc/PID/maps"))
    if not separate:
        return DoctorCheck(BLAS_CHECK, "ok", "No BLAS library is loaded besides torch's own.", facts)
    unset: list[Library] = []
    pools: list[str] = []
    for lib in separate:
        names = BLAS_THREAD_VARS.get(lib.name, ("OMP_NUM_THREADS",))
        setting = next(((n, env[n]) for n in names if env.get(n, "").strip()), None)
        if setting is None:
            unset.append(lib)
            size = usable_cpus
            facts.append(Fact(f"{names[0]} ({lib.owner or lib.name})", "unset", "", "environment"))
        else:
            size = _first_count(setting[1]) or usable_cpus
            facts.append(Fact(f"{setting[0]} ({lib.owner or lib.name})", setting[1], "", "environment"))
        pools.append(f"{lib.owner or 'system'}'s {lib.name} ({size} thread{'s' if size != 1 else ''})")
    if blas_busy is not None:
        facts.append(Fact("separate BLAS pool started (threaded BLAS work ran)", blas_busy, "",
                          "OpenBLAS blas_server_avail at the window's end, in a pass forked from the fork server"))
    torch_part = f"torch's {torch_threads} intra-op threads" if torch_threads is not None else "torch's pool"
    if not unset:
        return DoctorCheck(BLAS_CHECK, "ok",
                           f"{', '.join(pools)} beside {torch_part}: its thread count is set.", facts)
    if not blas_busy:
        why = "did no work in this run" if blas_busy is False else "is idle unless numpy/scipy linear algebra runs"
        return DoctorCheck(BLAS_CHECK, "ok",
                           f"{', '.join(pools)} is loaded beside {torch_part} with its thread count unset; "
                           f"its pool {why}.", facts)
    lib = unset[0]
    var = BLAS_THREAD_VARS.get(lib.name, ("OMP_NUM_THREADS",))[0]
    facts.append(Fact(BLAS_VARIABLE_FACT, var, "", "the library's own thread variable (the trial sets it to 1)"))
    summary = (f"{', '.join(pools)} did work beside {torch_part} on {usable_cpus} usable CPUs with {var} unset: "
               f"the two pools together want more threads than there are CPUs.")
    suggestion = (f"Export {var}=1 before numpy is imported (or wrap the numpy code in "
                  f"threadpoolctl.threadpool_limits(1); in DataLoader workers, call it in worker_init_fn), so "
                  f"{lib.owner or lib.name}'s linear algebra does not start {usable_cpus} threads beside torch's.")
    return DoctorCheck(BLAS_CHECK, "warn", summary, facts, suggestion=suggestion)


def check_cpu_quota(before: dict[str, int] | None, after: dict[str, int] | None, elapsed_s: float,
                    threads_busy: float | None, quota_cpus: float | None,
                    source: str = "cgroup cpu.stat") -> DoctorCheck:
    """Warn when the cgroup's CPU quota throttled the process during the window.

    A throttled period stalls every thread of the cgroup until the next period (100 ms by default)
    once the quota is spent: threads that spin or wait at a barrier burn quota without progress.
    throttled_usec adds up over the CPUs whose run queues were throttled, so its share of the window
    is taken per busy thread (per quota CPU when the busy count is unknown).
    """
    if not before or not after or "nr_periods" not in before or "nr_periods" not in after:
        return DoctorCheck("cpu_quota", "skipped", "No cgroup cpu.stat with throttling counters to read.")
    periods = after["nr_periods"] - before["nr_periods"]
    throttled = after.get("nr_throttled", 0) - before.get("nr_throttled", 0)
    throttled_us = after.get("throttled_usec", 0) - before.get("throttled_usec", 0)
    facts = [Fact("periods throttled", f"{throttled} / {periods}", "periods", source),
             Fact("throttled time", round(throttled_us / 1e6, 3), "s", source),
             Fact("window", round(elapsed_s, 3), "s", "runner")]
    if quota_cpus is not None:
        facts.append(Fact("CPU quota", quota_cpus, "CPUs", "cgroup cpu.max / cpu.cfs_quota_us"))
    if threads_busy is not None:
        facts.append(Fact("busy threads", round(threads_busy, 2), "threads", "thread recording"))
    if periods <= 0:
        return DoctorCheck("cpu_quota", "ok", "No CPU quota was enforced during the window.", facts)
    if throttled <= 0:
        return DoctorCheck("cpu_quota", "ok", f"The CPU quota throttled none of the {periods} periods.", facts)
    spread = threads_busy if threads_busy else (quota_cpus if quota_cpus else 1.0)
    share = min(100.0, 100.0 * throttled_us / (elapsed_s * 1e6 * max(spread, 1.0))) if elapsed_s > 0 else None
    if share is not None:
        facts.append(Fact("share of the window throttled", round(share, 1), "%", source))
    summary = (f"The cgroup's CPU quota throttled {throttled} of {periods} periods "
               f"({100 * throttled / periods:.0f}%)"
               + (f", {share:.0f}% of the window per busy thread" if share is not None else "")
               + (f": {threads_busy:.1f} busy threads against a quota of {quota_cpus:g} CPUs."
                  if threads_busy is not None and quota_cpus is not None else "."))
    n = max(1, math.floor(quota_cpus)) if quota_cpus else None
    suggestion = ((f"Match the thread counts to the quota: torch.set_num_threads({n}) (floor of {quota_cpus:g} CPUs), "
                   f"with DataLoader workers and other processes of the cgroup counted in it; or raise the quota.")
                  if n is not None else
                  "Match the thread counts to the cgroup's CPU quota (torch.set_num_threads(floor(quota))), "
                  "or raise the quota.")
    return DoctorCheck("cpu_quota", "warn", summary, facts, suggestion=suggestion, at_stake_pct=share)


def check_topology(topology: Topology, cpus_by_thread: dict[int, list[int]], migrations: int | None,
                   samples: int | None, allowed_cpus: list[int] | None = None) -> DoctorCheck:
    """Warn when busy threads share SMT siblings while whole cores are free, span NUMA nodes, or migrate often.

    `cpus_by_thread`: busy thread id -> the CPUs the sampler saw it on (its `cpus`); `migrations` and
    `samples`: over those threads, CPU changes between consecutive samples and the pairs of
    consecutive samples (the sampler's `cpu_changes`, and `cpu_samples` - 1 per thread). A sampled
    CPU is where the thread last ran, so the sibling rule assumes threads mostly stay put.
    `allowed_cpus`: the affinity; a free core outside it is not free to the process.
    """
    if not topology.siblings:
        return DoctorCheck("topology", "skipped", "No CPU topology in sysfs.")
    cores = topology.cores
    facts = [Fact("NUMA nodes", len(topology.nodes), "", "/sys/devices/system/node"),
             Fact("cores", len(cores), "", "/sys/devices/system/cpu/*/topology"),
             Fact("logical CPUs", len(topology.siblings), "", "/sys/devices/system/cpu/*/topology"),
             Fact("SMT", topology.smt, "", "thread_siblings_list")]
    if not cpus_by_thread:
        return DoctorCheck("topology", "skipped", "No per-thread CPU readings (the thread recording did not run).",
                           facts)
    used = sorted({c for cpus in cpus_by_thread.values() for c in cpus})
    facts.append(Fact("busy threads", len(cpus_by_thread), "threads", "thread recording"))
    facts.append(Fact("CPUs the busy threads ran on", ",".join(map(str, used)), "", "thread recording"))
    problems: list[str] = []
    suggestions: list[str] = []

    allowed = set(allowed_cpus) if allowed_cpus is not None else set(topology.siblings)
    shared = [core for core in cores if _siblings_shared(core, cpus_by_thread)]
    free = [core for core in cores if set(core) <= allowed
            and not any(set(cpus) & set(core) for cpus in cpus_by_thread.values())]
    if shared and free:
        facts.append(Fact("cores shared by busy threads", len(shared), "cores", "thread recording"))
        facts.append(Fact("free cores", len(free), "cores", "thread recording"))
        problems.append(f"busy threads shared the SMT siblings of {len(shared)} core(s) while {len(free)} whole "
                        f"core(s) had none")
        suggestions.append("bind one thread per core: OMP_PROC_BIND=close OMP_PLACES=cores (set before torch is "
                           "imported), and no more threads than cores")

    nodes = sorted({n for n in (topology.node_of(c) for c in used) if n is not None})
    facts.append(Fact("NUMA nodes the busy threads ran on", ",".join(map(str, nodes)), "", "thread recording"))
    if len(nodes) > 1:
        node = nodes[0]
        problems.append(f"busy threads ran on {len(nodes)} NUMA nodes ({', '.join(map(str, nodes))}): "
                        f"some of them reach memory on the other node")
        suggestions.append(f"keep the process on one node: numactl --cpunodebind={node} --membind={node} python ... "
                           f"(with torch.set_num_threads of that node's cores), or one process per node")

    placement_matters = topology.smt or len(topology.nodes) > 1
    if migrations is not None and samples and samples >= MIGRATION_MIN_SAMPLES and placement_matters:
        share = migrations / samples
        facts.append(Fact("CPU changes between samples", f"{migrations} / {samples}", "", "thread recording"))
        facts.append(Fact("share of samples with a CPU change", round(100 * share, 1), "%", "thread recording"))
        if share > MIGRATION_SHARE_MAX:
            problems.append(f"busy threads changed CPU in {100 * share:.0f}% of the sampled intervals "
                            f"(above {100 * MIGRATION_SHARE_MAX:.0f}%)")
            suggestions.append("pin the pool: OMP_PROC_BIND=close OMP_PLACES=cores, or taskset -c <cpus> python ...")

    if not problems:
        where = "one NUMA node" if len(topology.nodes) == 1 else f"{len(topology.nodes)} NUMA nodes"
        smt = "with SMT" if topology.smt else "without SMT"
        return DoctorCheck("topology", "ok", f"Busy threads fit the topology ({where}, {smt}).", facts)
    unique = list(dict.fromkeys(suggestions))
    return DoctorCheck("topology", "warn", _sentence("; ".join(problems)), facts,
                       suggestion=_sentence("; ".join(unique)))


def _siblings_shared(core: tuple[int, ...], cpus_by_thread: dict[int, list[int]]) -> bool:
    """Two different threads seen on two different logical CPUs of this core (one CPU taken in turns is not SMT)."""
    seen: list[tuple[int, int]] = [(t, c) for t, cpus in cpus_by_thread.items() for c in cpus if c in core]
    return any(t1 != t2 and c1 != c2 for t1, c1 in seen for t2, c2 in seen)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


# dtype -> (the profiler's name, instructions that compute it natively)
LOW_PRECISION = {
    "BFloat16": ("bfloat16", ("avx512_bf16", "amx_bf16")),
    "Half": ("float16", ("avx512_fp16", "amx_fp16")),
}


def _dtype_shares(op_dtypes: dict[str, float]) -> dict[str, float]:
    """Shares keyed by the bare dtype name: the profiler writes "c10::BFloat16", "c10::Half", "float"."""
    out: dict[str, float] = {}
    for name, share in op_dtypes.items():
        key = name.split("::")[-1]
        out[key] = out.get(key, 0.0) + share
    return out


def check_low_precision(flags: set[str], op_dtypes: dict[str, float]) -> DoctorCheck:
    """Warn when bf16/fp16 operators take time on a CPU without the instructions that compute them.

    Without avx512_bf16/amx_bf16 (bf16) or avx512_fp16/amx_fp16 (fp16) the kernels convert to fp32,
    compute there, and convert back: the conversions come on top of fp32's work.
    """
    if not flags:
        return DoctorCheck("low_precision", "skipped", "No CPU flags to read (/proc/cpuinfo).")
    if not op_dtypes:
        return DoctorCheck("low_precision", "skipped", "No operator time by dtype (the operator pass did not run).")
    shares = _dtype_shares(op_dtypes)
    facts: list[Fact] = []
    emulated: list[tuple[str, float, tuple[str, ...]]] = []
    for dtype, (label, needed) in LOW_PRECISION.items():
        share = shares.get(dtype, 0.0)
        have = [f for f in needed if f in flags]
        facts.append(Fact(f"{label} share of operator time", round(share, 1), "%", "operator pass"))
        facts.append(Fact(f"{label} instructions", ", ".join(have) or f"none of {', '.join(needed)}", "",
                          "/proc/cpuinfo flags"))
        if share >= LOW_PRECISION_MIN_SHARE_PCT and not have:
            emulated.append((label, share, needed))
    if not emulated:
        return DoctorCheck("low_precision", "ok",
                           "No low-precision operator time without the instructions that compute it.", facts)
    parts = [f"{label} operators take {share:.0f}% of operator time but this CPU has none of {', '.join(needed)}"
             for label, share, needed in emulated]
    labels = " and ".join(label for label, _, _ in emulated)
    summary = "; ".join(parts) + ": they run through conversions to and from fp32."
    suggestion = (f"Run in fp32 on this CPU (drop the {labels} autocast or .to(dtype)), and measure: it is often "
                  f"faster here; or run {labels} on a CPU with those instructions (bf16: Cooper Lake, Sapphire "
                  f"Rapids or later, AMD Zen 4 or later; fp16: Sapphire Rapids or later).")
    return DoctorCheck("low_precision", "warn", summary, facts, suggestion=suggestion,
                       at_stake_pct=round(sum(share for _, share, _ in emulated), 1))
