"""Turns a thread-sampler recording (sampler.py) into the report's `threads` section (model.Threads).

`analyse(recording, usable_cpus)` is pure: the same recording gives the same
numbers, so it is tested on real recordings committed under tests/data/threads.

Measures (docs/measurements.md, threads). Over the whole process tree, between the
first and the last snapshot (`duration_s`):
- `mean_runnable` = Σ(run + wait) / wall: time-averaged number of threads
  that wanted a CPU (schedstat: run_ns on a CPU, wait_ns on a run queue);
- `runqueue_wait_share` = Σwait / Σ(run + wait);
- `cpu_used` = Σrun / wall, in CPUs;
- `machine_busy_cpus` from /proc/stat (user+nice+system+irq+softirq) and
  `others_cpus` = machine busy minus the tree and the sampler itself: CPUs
  other processes took (in a container /proc/stat may be the host's);
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
- "intra_op": named like their process: OpenMP, MKL and OpenBLAS workers
  inherit the process name (as do unnamed Python threads, which /proc
  cannot tell apart);
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

from typing import Any

from diagnose.layers.threads import procfs
from diagnose.report import io as report_io
from diagnose.report.model import Threads

ROLES = ("target", "dataloader_worker", "mp_worker", "helper", "child")
POOLS = ("main", "intra_op", "inter_op", "dataloader_pin", "other")
ACTIVE_MIN_CPUS = 0.01  # a thread that used >= 1% of a CPU over the run is active
COMPUTE_MIN_CPUS = 0.1  # a process using >= 0.1 CPU on average (or wanting >= 0.2) does compute
COMPUTE_MIN_RUNNABLE = 0.2
TIMELINE_MAX_POINTS = 400
CMDLINE_MAX_CHARS = 200

# thread row columns (sampler.THREAD_FIELDS)
_STATE, _RUN, _WAIT, _SLICES, _UTIME, _STIME, _VCSW, _NVCSW, _RMS = range(1, 10)


def role_of(process: dict[str, Any], root_pid: int) -> str:
    if process["pid"] == root_pid:
        return "target"
    if process.get("comm") == "pt_data_worker":
        return "dataloader_worker"
    cmd = " ".join(process.get("cmdline") or [])
    if "multiprocessing.resource_tracker" in cmd or "multiprocessing.semaphore_tracker" in cmd \
            or "multiprocessing.forkserver" in cmd:
        return "helper"
    if "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
        return "mp_worker"
    return "child"


def pool_of(thread_comm: str, tid: int, pid: int, process_comm: str) -> str:
    if tid == pid:
        return "main"
    if thread_comm == "PTThreadPool":
        return "inter_op"
    if thread_comm == "pt_data_pin":
        return "dataloader_pin"
    if thread_comm == process_comm:
        return "intra_op"
    return "other"


def _num(v: Any) -> float:
    return float(v) if v is not None else 0.0


def _schedstat_available(threads: list[dict[str, Any]]) -> bool:
    for th in threads:
        for row in (th.get("first"), th.get("last")):
            if row and row[_RUN] is not None and (row[_RUN] > 0 or (row[_SLICES] or 0) > 0):
                return True
    return False


class _Values:
    """How a row's cumulative counters become (cpu_ns, runnable_ns, wait_ns, nvcsw)."""

    def __init__(self, schedstat: bool, ticks_per_s: int):
        self.schedstat = schedstat
        self.ns_per_tick = 1e9 / ticks_per_s

    def of(self, row: list[Any] | None) -> tuple[float, float, float, float]:
        if row is None:
            return (0.0, 0.0, 0.0, 0.0)
        if self.schedstat:
            run, wait = _num(row[_RUN]), _num(row[_WAIT])
            return (run, run + wait, wait, _num(row[_NVCSW]))
        cpu = (_num(row[_UTIME]) + _num(row[_STIME])) * self.ns_per_tick
        return (cpu, _num(row[_RMS]) * 1e6, 0.0, _num(row[_NVCSW]))


def _sub(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x - y for x, y in zip(a, b))


def _wait_from(cpu_ns: float, runnable_ns: float, wait_ns: float, schedstat: bool) -> tuple[float, float]:
    """(runnable_ns, wait_ns): state sampling estimates wait as runnable minus CPU."""
    if schedstat:
        return runnable_ns, wait_ns
    runnable = max(runnable_ns, cpu_ns)
    return runnable, runnable - cpu_ns


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def analyse(recording: dict[str, Any], usable_cpus: int) -> Threads:
    """The report's `threads` section (module docstring); units in the field names, CPUs as counts."""
    return report_io.typed(Threads, _analyse(recording, usable_cpus))


def _analyse(recording: dict[str, Any], usable_cpus: int) -> dict[str, Any]:
    fmt = recording.get("format")
    if not isinstance(fmt, str) or not fmt.startswith("diagnose.threads/"):
        raise ValueError(f"not a thread-sampler recording (format {fmt!r})")
    snapshots = recording.get("snapshots") or []
    health_in = recording.get("health") or {}
    out: dict[str, Any] = {"usable_cpus": usable_cpus, "samples": int(health_in.get("samples") or 0)}
    if len(snapshots) < 2 or snapshots[-1]["t_s"] <= snapshots[0]["t_s"]:
        out.update(duration_s=0.0, mean_runnable=None, runqueue_wait_share=None, cpu_used=None, processes=[],
                   reason="fewer than two samples: the target ended before the sampler could measure it",
                   health=_health(health_in, 0.0, recording))
        return out

    ticks_per_s = int(recording.get("clock_ticks_per_s") or 100)
    threads = recording.get("threads") or []
    processes = recording.get("processes") or []
    t_first, t_last = snapshots[0]["t_s"], snapshots[-1]["t_s"]
    wall_s = t_last - t_first
    wall_ns = wall_s * 1e9
    schedstat = _schedstat_available(threads)
    values = _Values(schedstat, ticks_per_s)
    root_pid = recording.get("root_pid")

    # ---- per thread totals, pools, per process sums
    base = [values.of(th["first"]) if th.get("in_first_snapshot") else (0.0, 0.0, 0.0, 0.0) for th in threads]
    per_proc: list[dict[str, Any]] = [
        {"cpu": 0.0, "runnable": 0.0, "wait": 0.0, "nvcsw": 0.0, "threads": {}, "active": {},
         "pool_cpu": {}, "pool_runnable": {}, "pool_wait": {}, "cpus_allowed": set()}
        for _ in processes
    ]
    busy: list[dict[str, Any]] = []
    for th, b in zip(threads, base):
        cpu, runnable, wait, nvcsw = _sub(values.of(th.get("last")), b)
        runnable, wait = _wait_from(cpu, runnable, wait, schedstat)
        p = per_proc[th["process"]]
        proc = processes[th["process"]]
        pool = pool_of(th.get("comm", ""), th["tid"], th["pid"], proc.get("comm", ""))
        p["cpu"] += cpu
        p["runnable"] += runnable
        p["wait"] += wait
        p["nvcsw"] += nvcsw
        p["threads"][pool] = p["threads"].get(pool, 0) + 1
        if cpu >= ACTIVE_MIN_CPUS * wall_ns:
            p["active"][pool] = p["active"].get(pool, 0) + 1
            busy.append({"pid": th["pid"], "tid": th["tid"], "pool": pool, "cpu_used": _round(cpu / wall_ns),
                         "cpus": th.get("cpus") or [], "cpu_samples": th.get("cpu_samples") or 0,
                         "cpu_changes": th.get("cpu_changes") or 0})
        p["pool_cpu"][pool] = p["pool_cpu"].get(pool, 0.0) + cpu
        p["pool_runnable"][pool] = p["pool_runnable"].get(pool, 0.0) + runnable
        p["pool_wait"][pool] = p["pool_wait"].get(pool, 0.0) + wait
        if th.get("cpus_allowed"):
            p["cpus_allowed"].add(th["cpus_allowed"])

    max_threads = [0] * len(processes)
    workers_max = 0
    for snap in snapshots:
        workers_now = 0
        for pidx, _cpu_ticks, n_threads in snap.get("procs") or []:
            max_threads[pidx] = max(max_threads[pidx], n_threads)
            if processes[pidx].get("comm") == "pt_data_worker":
                workers_now += 1
        workers_max = max(workers_max, workers_now)

    rows_out = []
    for i, (proc, p) in enumerate(zip(processes, per_proc)):
        role = role_of(proc, root_pid)
        cmd = " ".join(proc.get("cmdline") or [])
        rows_out.append({
            "pid": proc["pid"], "ppid": proc.get("ppid"), "role": role, "name": proc.get("comm"),
            "cmdline": cmd[:CMDLINE_MAX_CHARS],
            "threads": _ordered(p["threads"]), "active_threads": _ordered(p["active"]),
            "max_threads": max(max_threads[i], proc.get("max_threads") or 0),
            "mean_runnable": _round(p["runnable"] / wall_ns),
            "cpu_used": _round(p["cpu"] / wall_ns),
            "cpu_s": _round(p["cpu"] / 1e9), "wait_s": _round(p["wait"] / 1e9),
            "wait_share": _round(p["wait"] / p["runnable"]) if p["runnable"] > 0 else 0.0,
            "involuntary_switches": int(p["nvcsw"]),
            "pools": {pool: {"threads": p["threads"][pool], "active_threads": p["active"].get(pool, 0),
                             "cpu_s": _round(p["pool_cpu"][pool] / 1e9), "wait_s": _round(p["pool_wait"][pool] / 1e9),
                             "mean_runnable": _round(p["pool_runnable"][pool] / wall_ns)}
                      for pool in _ordered(p["threads"])},
            "cpus_allowed": sorted(p["cpus_allowed"]),
            "first_seen_s": _round(proc.get("first_seen_s", 0.0) - t_first, 3),
            "last_seen_s": _round(proc.get("last_seen_s", 0.0) - t_first, 3),
            "_order": (0 if role == "target" else 1, -p["cpu"], proc["pid"]),
            "_index": i,
        })
    tree_cpu = sum(p["cpu"] for p in per_proc)
    tree_runnable = sum(p["runnable"] for p in per_proc)
    tree_wait = sum(p["wait"] for p in per_proc)
    tree_nvcsw = sum(p["nvcsw"] for p in per_proc)

    pools: dict[str, dict[str, Any]] = {}
    for r in rows_out:
        for pool, v in r["pools"].items():
            agg = pools.setdefault(pool, {"threads": 0, "active_threads": 0, "cpu_s": 0.0, "wait_s": 0.0,
                                          "mean_runnable": 0.0})
            for k in agg:
                agg[k] += v[k]
    pools = {k: {kk: (_round(vv) if isinstance(vv, float) else vv) for kk, vv in pools[k].items()}
             for k in POOLS if k in pools}

    # ---- the machine
    machine_busy = others = machine_cpus = None
    c0, c1 = snapshots[0].get("cpu"), snapshots[-1].get("cpu")
    sampler_cpu_s = float(health_in.get("sampler_cpu_s") or 0.0)
    if c0 and c1:
        b0, i0 = procfs.busy_idle_ticks(c0)
        b1, i1 = procfs.busy_idle_ticks(c1)
        machine_busy = (b1 - b0) / ticks_per_s / wall_s
        machine_cpus = ((b1 - b0) + (i1 - i0)) / ticks_per_s / wall_s
        others = max(0.0, machine_busy - tree_cpu / wall_ns - sampler_cpu_s / wall_s)

    timeline, per_process, busy_share = _timeline(snapshots, threads, base, values, len(processes), ticks_per_s)
    rows_out.sort(key=lambda r: r["_order"])
    timeline["processes"] = [{"pid": r["pid"], **per_process[r["_index"]]} for r in rows_out]
    for r in rows_out:
        del r["_order"], r["_index"]

    for r in rows_out:
        r["compute"] = r["role"] != "helper" and (
            (r["cpu_used"] or 0) >= COMPUTE_MIN_CPUS or (r["mean_runnable"] or 0) >= COMPUTE_MIN_RUNNABLE)
    compute = [r for r in rows_out if r["compute"]]
    out.update(
        duration_s=_round(wall_s, 3),
        interval_s=recording.get("interval_s"),
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
        other_processes=[{"pid": o["pid"], "name": o["comm"], "cpu_s": _round(o["cpu_ticks"] / ticks_per_s, 2)}
                         for o in recording.get("other_processes") or []][:5],
        processes=rows_out,
        compute_processes=len(compute),
        dataloader_workers=workers_max,
        pools=pools,
        busy_threads=busy,
        timeline=timeline,
        health=_health(health_in, wall_s, recording),
    )
    return out


def _ordered(counts: dict[str, Any]) -> dict[str, Any]:
    return {k: counts[k] for k in POOLS if k in counts}


def _timeline(snapshots, threads, base, values: _Values, n_processes: int,
              ticks_per_s: int) -> tuple[dict[str, Any], list[dict[str, list[float]]], float]:
    """Per-interval runnable threads and CPUs (tree and machine; each process); and the busy share.

    Cumulative sums are built at every kept snapshot, then differenced at up
    to TIMELINE_MAX_POINTS evenly chosen snapshots, so every interval's
    average is exact whatever the points chosen.
    """
    n = len(snapshots)
    times = [s["t_s"] for s in snapshots]
    # each thread's first and last readings (kept apart from decimation) as events in time
    events = []
    for i, th in enumerate(threads):
        for key, t_key in (("first", "first_seen_s"), ("last", "last_seen_s")):
            if th.get(key) is not None:
                events.append((th[t_key], i, th[key]))
    events.sort(key=lambda e: e[0])
    current = [(0.0, 0.0, 0.0, 0.0)] * len(threads)
    proc_sum = [[0.0, 0.0] for _ in range(n_processes)]  # cpu_ns, runnable_ns
    cum_tree = []  # per snapshot: (cpu, runnable)
    cum_proc = []  # per snapshot: list of (cpu, runnable) per process
    ev = 0

    def apply(i: int, row: list[Any]) -> None:
        new = _sub(values.of(row), base[i])
        old = current[i]
        if new[0] < old[0] or new[1] < old[1]:
            return  # an older reading than one already applied
        current[i] = new
        s = proc_sum[threads[i]["process"]]
        s[0] += new[0] - old[0]
        s[1] += new[1] - old[1]

    for k, snap in enumerate(snapshots):
        while ev < len(events) and events[ev][0] <= times[k] + 1e-9:
            apply(events[ev][1], events[ev][2])
            ev += 1
        for row in snap["threads"]:
            apply(row[0], row)
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
    tl: dict[str, Any] = {"t_s": [], "runnable": [], "cpu_used": [], "machine_busy_cpus": [], "processes": []}
    per_proc_tl = [{"runnable": [], "cpu_used": []} for _ in range(n_processes)]
    for a, b in zip(picks, picks[1:]):
        dt_s = times[b] - times[a]
        if dt_s <= 0:
            continue
        dt = dt_s * 1e9
        tl["t_s"].append(round(times[b] - times[0], 3))
        tl["cpu_used"].append(round((cum_tree[b][0] - cum_tree[a][0]) / dt, 3))
        tl["runnable"].append(round(max(cum_tree[b][1] - cum_tree[a][1], cum_tree[b][0] - cum_tree[a][0]) / dt, 3))
        ca, cb = snapshots[a].get("cpu"), snapshots[b].get("cpu")
        tl["machine_busy_cpus"].append(
            round((procfs.busy_idle_ticks(cb)[0] - procfs.busy_idle_ticks(ca)[0]) / ticks_per_s / dt_s, 3)
            if ca and cb else None)
        for p in range(n_processes):
            cpu = cum_proc[b][p][0] - cum_proc[a][p][0]
            per_proc_tl[p]["cpu_used"].append(round(cpu / dt, 3))
            per_proc_tl[p]["runnable"].append(round(max(cum_proc[b][p][1] - cum_proc[a][p][1], cpu) / dt, 3))
    return tl, per_proc_tl, busy_share


def _health(h: dict[str, Any], wall_s: float, recording: dict[str, Any]) -> dict[str, Any]:
    sampler_cpu_s = float(h.get("sampler_cpu_s") or 0.0)
    return {
        "samples": int(h.get("samples") or 0),
        "kept_snapshots": int(h.get("kept_snapshots") or len(recording.get("snapshots") or [])),
        "missed_samples": int(h.get("missed_samples") or 0),
        "late_samples": int(h.get("late_samples") or 0),
        "unreadable_files": int(h.get("unreadable_files") or 0),
        "vanished_files": int(h.get("vanished_files") or 0),
        "sampler_cpu_s": _round(sampler_cpu_s),
        # the sampler's own CPU as a share of one CPU over the run
        "overhead_cpu_share": _round(sampler_cpu_s / wall_s) if wall_s > 0 else None,
        "read_s_mean": h.get("read_s_mean"),
        "interval_s": recording.get("interval_s"),
        "final_interval_s": h.get("final_interval_s"),
        "decimations": int(h.get("decimations") or 0),
        "slowdowns": int(h.get("slowdowns") or 0),
        "stopped_by": h.get("stopped_by"),
        "error": h.get("error"),
    }

