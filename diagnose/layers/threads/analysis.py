"""Turns a thread-sampler recording (sampler.py) into the report's `threads` section (model.Threads).

`analyse(recording, usable_cpus)` is pure: the same recording (recording.Recording,
read back with recording.load) gives the same numbers, so it is tested on real
recordings committed under tests/data/threads.

Measures (docs/measurements.md, threads). Over the whole process tree, between the
first and the last snapshot (`duration_s`):
- `mean_runnable` = Σ(run + wait) / wall: time-averaged number of threads
  that wanted a CPU (schedstat: run_ns on a CPU, wait_ns on a run queue);
- `runqueue_wait_share` = Σwait / Σ(run + wait);
- `cpu_used` = Σrun / wall, in CPUs;
- `machine_busy_cpus` from /proc/stat (user+nice+system+irq+softirq) and
  `others_cpus` = machine busy minus the tree, the sampler itself and its
  observers (diagnose attach: py-spy and diagnose): CPUs other processes
  took (in a container /proc/stat may be the host's);
- `busy_share`: share of the wall time in which the tree kept at least one
  CPU busy (Σ min(1, CPUs used per interval) × interval / wall): near 1 for
  CPU-bound work, low for work waiting on I/O or sleeping.
When schedstat reads `0 0 0` (scheduler statistics off), `schedstat_available`
is False and `method` is "state_sampling": CPU time comes from utime+stime
ticks, runnable time from the sampled R states (each R sighting counts one
interval; this underestimates, docs/measurements.md), and wait = runnable - CPU
(clipped at 0). `involuntary_switches_per_s` (preemptions) is given either way.

Each thread's total is its last reading minus its first, or minus zero when
it was born after the first snapshot. CPU a thread used after its last
reading before it exited is not seen (at most one interval per thread).

Processes get a role: "target" (the root), "dataloader_worker" (comm
pt_data_worker), "mp_worker" (multiprocessing spawn/forkserver child),
"helper" (multiprocessing's resource tracker or fork server) or "child".
Threads get a pool from their name (`task/<tid>/comm`):
- "main": the process's first thread (tid == pid);
- "inter_op": PTThreadPool; "dataloader_pin": pt_data_pin;
- "python": a thread the target started with Python's threading (a producer
  thread, a ThreadPoolExecutor's workers), by its (pid, tid) as the target
  recorded it (runner._record_python_threads): /proc names it like its
  process, as it does OpenMP's workers;
- "intra_op": named like their process: OpenMP, MKL and OpenBLAS workers
  inherit the process name;
- "other": any other name.
A thread is "active" when it used at least ACTIVE_MIN_CPUS of a CPU on
average over the run: pools often hold idle threads (a second OpenMP team
after set_num_threads, OpenBLAS's pool in a process that never calls BLAS).
A process does "compute" when it used >= COMPUTE_MIN_CPUS on average or
wanted >= COMPUTE_MIN_RUNNABLE (helpers never).

The section's fields (CPUs are counts of CPUs, averaged over the run; shares in 0..1):
    usable_cpus, samples, duration_s, interval_s, schedstat_available, method,
    mean_runnable, runqueue_wait_share, cpu_used, cpu_s, wait_s, busy_share,
    involuntary_switches_per_s, machine_busy_cpus, machine_cpus_seen
    (CPUs /proc/stat accounts for), others_cpus,
    other_processes: [{pid, name, cpu_s}] (top 5 outside the tree),
    processes: [{pid, ppid, role, name, cmdline, threads {pool: n},
                 active_threads {pool: n}, max_threads, mean_runnable, cpu_used,
                 cpu_s, wait_s, wait_share, involuntary_switches,
                 pools {pool: {threads, active_threads, cpu_s, wait_s,
                 mean_runnable}}, cpus_allowed [list strings], first_seen_s,
                 last_seen_s, compute}], the target first, then by CPU time,
    compute_processes, dataloader_workers (most alive at once),
    pools: {pool: {threads, active_threads, cpu_s, wait_s, mean_runnable}},
    busy_threads: [{pid, tid, pool, cpu_used, cpus (the CPUs it was seen on),
                    cpu_samples, cpu_changes}] (threads that did work: the doctor's topology check),
    timeline: {t_s (end of each interval), runnable, cpu_used,
               machine_busy_cpus, processes: [{pid, runnable, cpu_used}]}
              (<= TIMELINE_MAX_POINTS intervals, each an exact average),
    health: {samples, kept_snapshots, missed_samples, late_samples,
             unreadable_files, vanished_files, sampler_cpu_s,
             overhead_cpu_share (sampler CPU / wall), read_s_mean, interval_s,
             final_interval_s, decimations, slowdowns, stopped_by, error}.
With fewer than two snapshots: mean_runnable, runqueue_wait_share and
cpu_used are None, processes is empty, and `reason` says why.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from diagnose import procfs
from diagnose.layers.threads.recording import Health, Process, Recording, Snapshot, Thread, ThreadRow
from diagnose.report.model import (BusyThread, OtherProcess, PoolStats, ProcessTimeline, PythonThread,
                                   SamplerHealth, ThreadProcess, Threads, ThreadTimeline)

ROLES = ("target", "dataloader_worker", "mp_worker", "helper", "child")
POOLS = ("main", "intra_op", "inter_op", "dataloader_pin", "python", "other")
ACTIVE_MIN_CPUS = 0.01  # a thread that used >= 1% of a CPU over the run is active
COMPUTE_MIN_CPUS = 0.1  # a process using >= 0.1 CPU on average (or wanting >= 0.2) does compute
COMPUTE_MIN_RUNNABLE = 0.2
TIMELINE_MAX_POINTS = 400
CMDLINE_MAX_CHARS = 200

# (cpu_ns, runnable_ns, wait_ns, involuntary switches) of a thread: cumulative, or between two readings
_Totals = tuple[float, float, float, float]
_ZERO: _Totals = (0.0, 0.0, 0.0, 0.0)


def role_of(process: Process, root_pid: int) -> str:
    if process.pid == root_pid:
        return "target"
    if process.comm == "pt_data_worker":
        return "dataloader_worker"
    cmd = " ".join(process.cmdline or [])
    if "multiprocessing.resource_tracker" in cmd or "multiprocessing.semaphore_tracker" in cmd \
            or "multiprocessing.forkserver" in cmd:
        return "helper"
    if "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
        return "mp_worker"
    return "child"


def pool_of(thread_comm: str, tid: int, pid: int, process_comm: str, python: frozenset[tuple[int, int]] = frozenset()
            ) -> str:
    """A thread's pool (the module docstring); `python`: the (pid, tid) of the threads the target started with
    Python's threading, which /proc alone would put in the intra-op pool."""
    if tid == pid:
        return "main"
    if thread_comm == "PTThreadPool":
        return "inter_op"
    if thread_comm == "pt_data_pin":  # a Python thread too (DataLoader's pin-memory thread), named by torch
        return "dataloader_pin"
    if (pid, tid) in python:
        return "python"
    if thread_comm == process_comm:
        return "intra_op"
    return "other"


def _num(v: int | float | None) -> float:
    return float(v) if v is not None else 0.0


def _schedstat_available(threads: list[Thread]) -> bool:
    for th in threads:
        for row in (th.first, th.last):
            if row and row.run_ns is not None and (row.run_ns > 0 or (row.slices or 0) > 0):
                return True
    return False


class _Values:
    """How a row's cumulative counters become (cpu_ns, runnable_ns, wait_ns, nvcsw)."""

    def __init__(self, schedstat: bool, ticks_per_s: int):
        self.schedstat = schedstat
        self.ns_per_tick = 1e9 / ticks_per_s

    def of(self, row: ThreadRow | None) -> _Totals:
        if row is None:
            return _ZERO
        if self.schedstat:
            run, wait = _num(row.run_ns), _num(row.wait_ns)
            return (run, run + wait, wait, _num(row.nonvoluntary_ctxt))
        cpu = (_num(row.utime_ticks) + _num(row.stime_ticks)) * self.ns_per_tick
        return (cpu, _num(row.runnable_sampled_ms) * 1e6, 0.0, _num(row.nonvoluntary_ctxt))


def _sub(a: _Totals, b: _Totals) -> _Totals:
    return tuple(x - y for x, y in zip(a, b))


def _wait_from(cpu_ns: float, runnable_ns: float, wait_ns: float, schedstat: bool) -> tuple[float, float]:
    """(runnable_ns, wait_ns): state sampling estimates wait as runnable minus CPU."""
    if schedstat:
        return runnable_ns, wait_ns
    runnable = max(runnable_ns, cpu_ns)
    return runnable, runnable - cpu_ns


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


@dataclass
class _ProcessSums:
    """One process's threads added up over the run, in ns; per pool as well."""

    cpu: float = 0.0
    runnable: float = 0.0
    wait: float = 0.0
    nvcsw: float = 0.0
    threads: Counter[str] = field(default_factory=Counter)  # pool -> threads seen
    active: Counter[str] = field(default_factory=Counter)  # pool -> threads that did work
    pool_cpu: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    pool_runnable: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    pool_wait: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpus_allowed: set[str] = field(default_factory=set)


def analyse(recording: Recording, usable_cpus: int, python_threads: Sequence[PythonThread] = ()) -> Threads:
    """The report's `threads` section (module docstring); units in the field names, CPUs as counts.
    `python_threads`: the threads the target said it started (runner._record_python_threads), pool "python"."""
    snapshots = recording.snapshots
    health_in = recording.health
    if len(snapshots) < 2 or snapshots[-1].t_s <= snapshots[0].t_s:
        return Threads(usable_cpus=usable_cpus, samples=health_in.samples, duration_s=0.0,
                       reason="fewer than two samples: the target ended before the sampler could measure it",
                       health=_health(health_in, 0.0, recording))

    ticks_per_s = recording.clock_ticks_per_s
    threads = recording.threads
    processes = recording.processes
    t_first, t_last = snapshots[0].t_s, snapshots[-1].t_s
    wall_s = t_last - t_first
    wall_ns = wall_s * 1e9
    schedstat = _schedstat_available(threads)
    values = _Values(schedstat, ticks_per_s)
    root_pid = recording.root_pid
    python = frozenset((p.pid, p.tid) for p in python_threads)

    # ---- per thread totals, pools, per process sums
    base = [values.of(th.first) if th.in_first_snapshot else _ZERO for th in threads]
    per_proc = [_ProcessSums() for _ in processes]
    busy: list[BusyThread] = []
    for th, b in zip(threads, base):
        cpu, runnable, wait, nvcsw = _sub(values.of(th.last), b)
        runnable, wait = _wait_from(cpu, runnable, wait, schedstat)
        p = per_proc[th.process]
        pool = pool_of(th.comm, th.tid, th.pid, processes[th.process].comm, python)
        p.cpu += cpu
        p.runnable += runnable
        p.wait += wait
        p.nvcsw += nvcsw
        p.threads[pool] += 1
        if cpu >= ACTIVE_MIN_CPUS * wall_ns:
            p.active[pool] += 1
            busy.append(BusyThread(pid=th.pid, tid=th.tid, pool=pool, cpu_used=_round(cpu / wall_ns),
                                   cpus=list(th.cpus), cpu_samples=th.cpu_samples, cpu_changes=th.cpu_changes))
        p.pool_cpu[pool] += cpu
        p.pool_runnable[pool] += runnable
        p.pool_wait[pool] += wait
        if th.cpus_allowed:
            p.cpus_allowed.add(th.cpus_allowed)

    max_threads = [0] * len(processes)
    workers_max = 0
    for snap in snapshots:
        workers_now = 0
        for row in snap.procs:
            max_threads[row.process] = max(max_threads[row.process], row.num_threads)
            if processes[row.process].comm == "pt_data_worker":
                workers_now += 1
        workers_max = max(workers_max, workers_now)

    rows_out: list[ThreadProcess] = []
    for i, (proc, p) in enumerate(zip(processes, per_proc)):
        role = role_of(proc, root_pid)
        mean_runnable, cpu_used = _round(p.runnable / wall_ns), _round(p.cpu / wall_ns)
        rows_out.append(ThreadProcess(
            pid=proc.pid, ppid=proc.ppid, role=role, name=proc.comm,
            cmdline=" ".join(proc.cmdline or [])[:CMDLINE_MAX_CHARS],
            threads=_ordered(p.threads), active_threads=_ordered(p.active),
            max_threads=max(max_threads[i], proc.max_threads),
            mean_runnable=mean_runnable, cpu_used=cpu_used,
            cpu_s=_round(p.cpu / 1e9), wait_s=_round(p.wait / 1e9),
            wait_share=_round(p.wait / p.runnable) if p.runnable > 0 else 0.0,
            involuntary_switches=int(p.nvcsw),
            pools={pool: PoolStats(threads=p.threads[pool], active_threads=p.active[pool],
                                   cpu_s=_round(p.pool_cpu[pool] / 1e9), wait_s=_round(p.pool_wait[pool] / 1e9),
                                   mean_runnable=_round(p.pool_runnable[pool] / wall_ns))
                   for pool in _ordered(p.threads)},
            cpus_allowed=sorted(p.cpus_allowed),
            first_seen_s=_round(proc.first_seen_s - t_first, 3),
            last_seen_s=_round(proc.last_seen_s - t_first, 3),
            compute=role != "helper" and (cpu_used >= COMPUTE_MIN_CPUS or mean_runnable >= COMPUTE_MIN_RUNNABLE),
        ))
    tree_cpu = sum(p.cpu for p in per_proc)
    tree_runnable = sum(p.runnable for p in per_proc)
    tree_wait = sum(p.wait for p in per_proc)
    tree_nvcsw = sum(p.nvcsw for p in per_proc)

    # the tree's pools: the processes' (rounded) pool totals added up in the recording's order, then rounded
    pools: dict[str, PoolStats] = {}
    for r in rows_out:
        for pool, v in r.pools.items():
            agg = pools.setdefault(pool, PoolStats())
            agg.threads += v.threads
            agg.active_threads += v.active_threads
            agg.cpu_s += v.cpu_s
            agg.wait_s += v.wait_s
            agg.mean_runnable += v.mean_runnable
    for agg in pools.values():
        agg.cpu_s, agg.wait_s, agg.mean_runnable = _round(agg.cpu_s), _round(agg.wait_s), _round(agg.mean_runnable)
    pools = {k: pools[k] for k in POOLS if k in pools}

    # ---- the machine
    machine_busy = others = machine_cpus = None
    c0, c1 = snapshots[0].cpu, snapshots[-1].cpu
    if c0 and c1:
        b0, i0 = procfs.busy_idle_ticks(c0)
        b1, i1 = procfs.busy_idle_ticks(c1)
        machine_busy = (b1 - b0) / ticks_per_s / wall_s
        machine_cpus = ((b1 - b0) + (i1 - i0)) / ticks_per_s / wall_s
        others = max(0.0, machine_busy - tree_cpu / wall_ns
                     - (health_in.sampler_cpu_s + health_in.observers_cpu_s) / wall_s)

    timeline, per_process, busy_share = _timeline(snapshots, threads, processes, base, values, ticks_per_s)
    # the target first, then by CPU time (ties in the recording's order)
    order = sorted(range(len(processes)), key=lambda i: (0 if rows_out[i].role == "target" else 1,
                                                         -per_proc[i].cpu, processes[i].pid))
    timeline.processes = [per_process[i] for i in order]
    rows_out = [rows_out[i] for i in order]

    return Threads(
        usable_cpus=usable_cpus,
        samples=health_in.samples,
        duration_s=_round(wall_s, 3),
        interval_s=recording.interval_s,
        schedstat_available=schedstat,
        method="schedstat" if schedstat else "state_sampling",
        mean_runnable=_round(tree_runnable / wall_ns),
        runqueue_wait_share=_round(tree_wait / tree_runnable) if tree_runnable > 0 else 0.0,
        cpu_used=_round(tree_cpu / wall_ns),
        cpu_s=_round(tree_cpu / 1e9),
        wait_s=_round(tree_wait / 1e9),
        busy_share=_round(busy_share),
        involuntary_switches_per_s=_round(tree_nvcsw / wall_s, 1),
        machine_busy_cpus=_round(machine_busy),
        machine_cpus_seen=_round(machine_cpus, 2),
        others_cpus=_round(others),
        other_processes=[OtherProcess(pid=o.pid, name=o.comm, cpu_s=_round(o.cpu_ticks / ticks_per_s, 2))
                         for o in recording.other_processes[:5]],
        processes=rows_out,
        compute_processes=sum(1 for r in rows_out if r.compute),
        dataloader_workers=workers_max,
        pools=pools,
        busy_threads=busy,
        timeline=timeline,
        health=_health(health_in, wall_s, recording),
    )


def _ordered(counts: Counter[str]) -> dict[str, int]:
    return {k: counts[k] for k in POOLS if k in counts}


def _timeline(snapshots: list[Snapshot], threads: list[Thread], processes: list[Process], base: list[_Totals],
              values: _Values, ticks_per_s: int) -> tuple[ThreadTimeline, list[ProcessTimeline], float]:
    """Per-interval runnable threads and CPUs (tree and machine; each process); and the busy share.

    Cumulative sums are built at every kept snapshot, then differenced at up
    to TIMELINE_MAX_POINTS evenly chosen snapshots, so every interval's
    average is exact whatever the points chosen. The timeline comes without
    its processes, given apart in the recording's order: the caller orders them.
    """
    n = len(snapshots)
    n_processes = len(processes)
    times = [s.t_s for s in snapshots]
    # each thread's first and last readings (kept apart from decimation) as events in time
    events: list[tuple[float, int, ThreadRow]] = []
    for i, th in enumerate(threads):
        for row, t_s in ((th.first, th.first_seen_s), (th.last, th.last_seen_s)):
            if row is not None:
                events.append((t_s, i, row))
    events.sort(key=lambda e: e[0])
    current = [_ZERO] * len(threads)
    proc_sum = [[0.0, 0.0] for _ in range(n_processes)]  # cpu_ns, runnable_ns
    cum_tree = []  # per snapshot: (cpu, runnable)
    cum_proc = []  # per snapshot: list of (cpu, runnable) per process
    ev = 0

    def apply(i: int, row: ThreadRow) -> None:
        new = _sub(values.of(row), base[i])
        old = current[i]
        if new[0] < old[0] or new[1] < old[1]:
            return  # an older reading than one already applied
        current[i] = new
        s = proc_sum[threads[i].process]
        s[0] += new[0] - old[0]
        s[1] += new[1] - old[1]

    for k, snap in enumerate(snapshots):
        while ev < len(events) and events[ev][0] <= times[k] + 1e-9:
            apply(events[ev][1], events[ev][2])
            ev += 1
        for row in snap.threads:
            apply(row.thread, row)
        cum_proc.append([(s[0], s[1]) for s in proc_sum])
        cum_tree.append((sum(s[0] for s in proc_sum), sum(s[1] for s in proc_sum)))

    busy_ns = 0.0
    for k in range(1, n):
        dt = (times[k] - times[k - 1]) * 1e9
        if dt > 0:
            busy_ns += min(dt, cum_tree[k][0] - cum_tree[k - 1][0])
    wall = (times[-1] - times[0]) * 1e9
    busy_share = busy_ns / wall if wall > 0 else 0.0

    if n - 1 > TIMELINE_MAX_POINTS:
        picks = sorted({round(j * (n - 1) / TIMELINE_MAX_POINTS) for j in range(TIMELINE_MAX_POINTS + 1)})
    else:
        picks = list(range(n))
    tl = ThreadTimeline()
    per_proc_tl = [ProcessTimeline(pid=proc.pid) for proc in processes]
    for a, b in zip(picks, picks[1:]):
        dt_s = times[b] - times[a]
        if dt_s <= 0:
            continue
        dt = dt_s * 1e9
        tl.t_s.append(round(times[b] - times[0], 3))
        tl.cpu_used.append(round((cum_tree[b][0] - cum_tree[a][0]) / dt, 3))
        tl.runnable.append(round(max(cum_tree[b][1] - cum_tree[a][1], cum_tree[b][0] - cum_tree[a][0]) / dt, 3))
        ca, cb = snapshots[a].cpu, snapshots[b].cpu
        tl.machine_busy_cpus.append(
            round((procfs.busy_idle_ticks(cb)[0] - procfs.busy_idle_ticks(ca)[0]) / ticks_per_s / dt_s, 3)
            if ca and cb else None)
        for p in range(n_processes):
            cpu = cum_proc[b][p][0] - cum_proc[a][p][0]
            per_proc_tl[p].cpu_used.append(round(cpu / dt, 3))
            per_proc_tl[p].runnable.append(round(max(cum_proc[b][p][1] - cum_proc[a][p][1], cpu) / dt, 3))
    return tl, per_proc_tl, busy_share


def _health(h: Health, wall_s: float, recording: Recording) -> SamplerHealth:
    return SamplerHealth(
        samples=h.samples,
        kept_snapshots=h.kept_snapshots or len(recording.snapshots),
        missed_samples=h.missed_samples,
        late_samples=h.late_samples,
        unreadable_files=h.unreadable_files,
        vanished_files=h.vanished_files,
        sampler_cpu_s=_round(h.sampler_cpu_s),
        observers_cpu_s=_round(h.observers_cpu_s) if h.observers_cpu_s else None,
        # the sampler's own CPU as a share of one CPU over the run
        overhead_cpu_share=_round(h.sampler_cpu_s / wall_s) if wall_s > 0 else None,
        read_s_mean=h.read_s_mean,
        interval_s=recording.interval_s,
        final_interval_s=h.final_interval_s,
        decimations=h.decimations,
        slowdowns=h.slowdowns,
        stopped_by=h.stopped_by,
        error=h.error,
    )
