"""The thread sampler: watches a process tree from its own process, through /proc.

    python -m diagnose.layers.threads.sampler --pid PID --out FILE [--interval S]
        [--max-duration S] [--max-snapshots N] [--ready FILE]

samples PID and all its descendants until they are all gone, or until it gets
SIGTERM/SIGINT (then it takes one last sample), and writes FILE atomically
(a temporary file in the same folder, then os.replace). It can start on a
process that already runs: the first sample is the baseline. With --ready it
creates that file once the first sample is taken, or with --start-when once
it watches for the start marker (the runner waits for it before the workload
begins: a pass forked from the fork server starts in milliseconds, faster
than this process). Exit status 1 when PID does not exist
(the recording is still written, with health.error).

With --start-when it waits (polling every 10 ms) until that file exists
before its first sample: the runner creates it when the measured workload
begins, so interpreter start-up and torch's import (seconds, one thread)
do not dilute the averages; with --stop-when it takes a last sample and
stops once that file exists (the runner creates it when the workload ends,
before results are written and the interpreter shuts down); with
--restart-when it drops what it recorded and starts over, once, when that
file appears (the runner creates it when the window of steps begins: what
came before was setup and warm-up).

It runs outside the target so the target's GIL, caches and thread pools are
untouched (docs/measurements.md). Each sample reads, per thread, `stat` and
`schedstat` (cumulative counters), `children` (to find new processes), and
every `status_every` samples `status` (context switches, CPU affinity;
every sample until schedstat has shown a non-zero value, since the fallback
needs them), and per process `stat` (and `cmdline` on its first
CMDLINE_READS sightings and when its comm changes, as at exec). Processes
started during the run are picked up when they live across a sample; known
processes stay watched when their parent exits and they are re-parented (a
grandchild whose parent exited before the sampler saw it is missed). The
sampler never counts itself, even when it runs inside the tree.

Rate and overhead (measured on this project's 2-CPU machine; numbers and
how to reproduce them in benchmarks/RESULTS.md, "Thread sampler overhead"):
one read of a thread costs ~37 us for stat+schedstat, ~30 us more with
status, ~9-12 us for children; a whole sample of a 3-thread process
(with its stat, /proc/stat and Python's own work) ~0.3 ms of CPU. At the
default interval, 0.1 s, and polling its start, window and stop markers
every 10 ms as diagnose runs it, the sampler used 2.1% of one CPU beside a
workload keeping both CPUs busy (1.0% of the machine), which bounds what it
takes from a CPU-bound workload; the wall-time slowdown was within the
noise of a shared machine (+5.3%, 95% interval -8%..+15%;
benchmarks/RESULTS.md). 0.05 s would double the
cost for little: totals do not depend on the interval (counters are
cumulative); it only sets the timeline's resolution, the state-sampling
fallback's precision, and the shortest-lived process that is seen. To bound
its cost on large trees the sampler doubles its interval (up to
`max_interval_s`) whenever its own CPU time over the last `BUDGET_WINDOW`
samples exceeds `cpu_budget_share` (2%) of the interval.

Memory is bounded for long runs: when `max_snapshots` snapshots are kept,
every other one is dropped (the first, the baseline, and the newest stay)
and the interval doubles, so a run of any length keeps fewer than
`max_snapshots` snapshots, evenly spaced after the first. Totals stay exact:
each thread's first and last readings are kept apart from the snapshots.
Timing: a slot that passed while a sample ran late is skipped and counted in
`missed_samples`; a sample starting more than half an interval after its
slot counts in `late_samples`.

The recording's fields are the types of recording.py (FORMAT
"diagnose.threads/1"): the tree's processes and threads, the kept snapshots
(one row of cumulative counters per thread, its columns named by
THREAD_FIELDS), the top CPU users outside the tree, and the sampling's
health. Per thread, `cpus`, `cpu_samples` and `cpu_changes` come from the
`processor` field of its stat (the CPU it last ran on, read at every sample
at no extra cost) and cover every sample: decimation drops none of them.
The sampling loop keeps plain lists and dicts, as it is the hot path;
`recording()` builds the typed recording from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import select
import signal
import sys
import time
from collections import deque
from typing import Any, Callable

from diagnose import procfs
from diagnose.layers.threads.recording import (FORMAT, THREAD_FIELDS, Health, OutsideProcess, Process, Recording,
                                               Snapshot, Thread, save)
DEFAULT_INTERVAL_S = 0.1
DEFAULT_MAX_SNAPSHOTS = 1000
DEFAULT_STATUS_EVERY = 10
DEFAULT_CPU_BUDGET_SHARE = 0.02
DEFAULT_MAX_INTERVAL_S = 2.0
BUDGET_WINDOW = 20
OTHER_PROCESSES_KEPT = 10
CMDLINE_READS = 3
START_POLL_S = 0.01


class Sampler:
    """Samples a process tree; `run()` loops, `sample()` takes one snapshot (for tests)."""

    def __init__(self, root_pid: int, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 proc_root: str = procfs.PROC, cpu_time: Callable[[], float] = time.process_time,
                 max_snapshots: int = DEFAULT_MAX_SNAPSHOTS, status_every: int = DEFAULT_STATUS_EVERY,
                 cpu_budget_share: float = DEFAULT_CPU_BUDGET_SHARE, max_interval_s: float = DEFAULT_MAX_INTERVAL_S,
                 self_pid: int | None = None, clock_ticks_per_s: int | None = None,
                 observers: tuple[int, ...] = ()):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if max_snapshots < 4:
            raise ValueError("max_snapshots must be at least 4")
        self.root_pid = root_pid
        self.interval_s = interval_s  # current interval: grows with decimation and slowdowns
        self.requested_interval_s = interval_s
        self.proc_root = proc_root
        self.max_snapshots = max_snapshots
        self.status_every = max(1, status_every)
        self.cpu_budget_share = cpu_budget_share
        self.max_interval_s = max(max_interval_s, interval_s)
        self._clock = clock
        self._sleep = sleep
        self._cpu_time = cpu_time
        self._self_pid = os.getpid() if self_pid is None else self_pid
        # other processes of the tool that measures (diagnose attach: py-spy and diagnose itself): their CPU time
        # is the observation's cost, neither the tree's nor other processes'
        self._observers = tuple(observers)
        self._ticks_per_s = clock_ticks_per_s or procfs.clock_ticks_per_s()
        self._errors = procfs.ReadErrors()
        self._stop = False
        self._t0: float | None = None
        self._last_began: float | None = None
        self._seen_tids: set[tuple[int, int]] = set()
        self._cpu0: float | None = None
        self._processes: list[dict[str, Any]] = []
        self._process_index: dict[tuple[int, int], int] = {}  # (pid, start_ticks) -> index
        self._alive: dict[int, int] = {}  # pid -> start_ticks of the tree's processes in the last sample
        self._threads: list[dict[str, Any]] = []
        self._thread_index: dict[tuple[int, int, int], int] = {}  # (pid, tid, start_ticks) -> index
        self._runnable_ms: list[float] = []  # per thread index: cumulative sampled-R time
        self._last_cpu: list[int | None] = []  # per thread index: processor at the last sample that read it
        self._snapshots: list[dict[str, Any]] = []
        self._schedstat_nonzero = False
        self._children_fallback = False
        self._health: dict[str, Any] = {
            "samples": 0, "late_samples": 0, "missed_samples": 0, "decimations": 0, "slowdowns": 0,
            "read_s_total": 0.0, "read_s_max": 0.0, "stopped_by": None, "error": None,
        }
        self._others_start: dict[int, tuple[str, int, int]] = {}
        self._others_end: dict[int, tuple[str, int, int]] = {}

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Ask `run()` to take a last sample and return (safe from a signal handler)."""
        self._stop = True

    def run(self, max_duration_s: float | None = None) -> Recording:
        """Sample until the tree is gone, `stop()` or `max_duration_s`; return the recording."""
        self._start()
        due = self._t0 if self._last_began is None else self._last_began + self.interval_s
        budget_cpu0 = self._cpu_time()
        budget_samples = 0
        while True:
            now = self._clock()
            if not self._stop and due > now:
                self._sleep(due - now)
            started = self._clock()
            if started - due > self.interval_s / 2:
                self._health["late_samples"] += 1
            if self._stop or (max_duration_s is not None and started - self._t0 >= max_duration_s):
                self._health["stopped_by"] = "stop" if self._stop else "max_duration"
                self.sample(final=True)
                break
            if not self.sample():
                self._health["stopped_by"] = "tree_exited" if self._processes else "root_not_found"
                break
            budget_samples += 1
            if budget_samples >= BUDGET_WINDOW:
                spent = self._cpu_time() - budget_cpu0
                if spent / budget_samples > self.cpu_budget_share * self.interval_s \
                        and self.interval_s * 2 <= self.max_interval_s:
                    self.interval_s *= 2
                    self._health["slowdowns"] += 1
                budget_cpu0, budget_samples = self._cpu_time(), 0
            due += self.interval_s
            now = self._clock()
            while due <= now:  # slots that passed while the sampler was busy or descheduled
                due += self.interval_s
                self._health["missed_samples"] += 1
        return self.recording()

    def _start(self) -> None:
        if self._t0 is None:
            self._t0 = self._clock()
            self._cpu0 = self._cpu_time()
            self._others_start = procfs.all_process_ticks(self.proc_root, None)

    # ------------------------------------------------------------ one sample

    def sample(self, final: bool = False) -> bool:
        """Take one snapshot; True while a process of the tree is still alive.

        A sample that finds the whole tree gone adds no snapshot: the run ended
        somewhere in the last interval and its end is not measurable.
        """
        self._start()
        began = self._clock()
        self._last_began = began
        t_s = began - self._t0
        errors = self._errors
        n = self._health["samples"]
        read_status = final or not self._schedstat_nonzero or n % self.status_every == 0
        procs_row: list[list[int]] = []
        rows: list[list[Any]] = []
        alive: dict[int, int] = {}
        root_start = self._root_start()
        queue = deque([(self.root_pid, root_start)])
        queue.extend((pid, start) for pid, start in self._alive.items() if pid != self.root_pid)
        seen: set[int] = set()
        ppids: dict[int, list[int]] | None = None
        while queue:
            pid, expected_start = queue.popleft()
            if pid in seen or pid == self._self_pid:
                continue
            seen.add(pid)
            info = procfs.read_process(pid, self.proc_root, errors, with_cmdline=False)
            if info is None or info.state in procfs.GONE_STATES:
                continue
            if expected_start is not None and info.start_ticks != expected_start:
                continue  # the pid was reused by an unrelated process
            if self._wants_cmdline(info):
                info.cmdline = procfs.read_cmdline(pid, self.proc_root, errors)
            pidx = self._process(info, t_s)
            alive[pid] = info.start_ticks
            procs_row.append([pidx, info.cpu_ticks, info.num_threads])
            tids = procfs.list_tids(pid, self.proc_root, errors)
            for tid in tids:
                status = read_status or (pid, tid) not in self._seen_tids
                c = procfs.read_thread(pid, tid, self.proc_root, errors, with_status=status)
                if c is None or c.state in procfs.GONE_STATES:
                    continue
                self._seen_tids.add((pid, tid))
                rows.append(self._thread_row(pid, pidx, c, t_s))
            kids = None if self._children_fallback else procfs.children_of(pid, tids, self.proc_root, None)
            if kids is None:
                self._children_fallback = True
                if ppids is None:
                    ppids = {}
                    for child, parent in procfs.ppid_map(self.proc_root, None).items():
                        ppids.setdefault(parent, []).append(child)
                kids = set(ppids.get(pid, []))
            queue.extend((k, None) for k in sorted(kids))
        self._alive = alive
        self._health["samples"] = n + 1
        if alive:
            cpu = procfs.machine_cpu_ticks(self.proc_root, errors)
            self._snapshots.append({"t_s": round(t_s, 6), "cpu": cpu, "procs": procs_row, "threads": rows})
            if len(self._snapshots) >= self.max_snapshots:
                self._decimate()
        else:
            self._health["tree_gone_s"] = round(t_s, 6)
        if final or not alive:
            self._others_end = procfs.all_process_ticks(self.proc_root, None)
        read_s = self._clock() - began
        self._health["read_s_total"] += read_s
        self._health["read_s_max"] = max(self._health["read_s_max"], read_s)
        return bool(alive)

    def _root_start(self) -> int | None:
        for p in self._processes:
            if p["pid"] == self.root_pid:
                return p["start_ticks"]
        return None

    def _wants_cmdline(self, info: procfs.ProcessInfo) -> bool:
        """argv changes at exec (a spawned child is a copy of its parent until then), so read it
        on a process's first CMDLINE_READS sightings and whenever its comm changes, not every sample."""
        idx = self._process_index.get((info.pid, info.start_ticks))
        if idx is None:
            return True
        p = self._processes[idx]
        return p["cmdline_reads"] < CMDLINE_READS or p["comm"] != info.comm

    def _process(self, info: procfs.ProcessInfo, t_s: float) -> int:
        key = (info.pid, info.start_ticks)
        idx = self._process_index.get(key)
        if idx is None:
            idx = len(self._processes)
            self._process_index[key] = idx
            self._processes.append({"pid": info.pid, "ppid": info.ppid, "comm": info.comm, "cmdline": info.cmdline,
                                    "start_ticks": info.start_ticks, "first_seen_s": round(t_s, 6),
                                    "last_seen_s": round(t_s, 6), "max_threads": info.num_threads,
                                    "cmdline_reads": 0})
        else:
            p = self._processes[idx]
            # comm and argv change at exec (a spawned child is a copy of its parent until then)
            p.update(ppid=info.ppid, comm=info.comm, last_seen_s=round(t_s, 6),
                     max_threads=max(p["max_threads"], info.num_threads))
            if info.cmdline is not None:
                p["cmdline"] = info.cmdline
        if info.cmdline is not None:
            self._processes[idx]["cmdline_reads"] += 1
        return idx

    def _thread_row(self, pid: int, pidx: int, c: procfs.ThreadCounters, t_s: float) -> list[Any]:
        key = (pid, c.tid, c.start_ticks)
        idx = self._thread_index.get(key)
        if idx is None:
            idx = len(self._threads)
            self._thread_index[key] = idx
            self._runnable_ms.append(0.0)
            self._threads.append({"process": pidx, "pid": pid, "tid": c.tid, "comm": c.comm,
                                  "start_ticks": c.start_ticks, "cpus_allowed": c.cpus_allowed,
                                  "first_seen_s": round(t_s, 6), "last_seen_s": round(t_s, 6),
                                  "in_first_snapshot": not self._snapshots, "first": None, "last": None,
                                  "cpus": [], "cpu_samples": 0, "cpu_changes": 0})
            self._last_cpu.append(None)
        th = self._threads[idx]
        if c.state == "R":
            self._runnable_ms[idx] += self.interval_s * 1000.0
        if c.run_ns or c.slices:
            self._schedstat_nonzero = True
        row = [idx, c.state, c.run_ns, c.wait_ns, c.slices, c.utime_ticks, c.stime_ticks,
               c.voluntary_ctxt, c.nonvoluntary_ctxt, round(self._runnable_ms[idx], 3)]
        if th["first"] is None:
            th["first"] = row
        elif th["last"] is not None:
            # status is read every few samples: carry its last values so `last` is complete
            prev = th["last"]
            if row[7] is None:
                row[7], row[8] = prev[7], prev[8]
        th["last"] = row
        th["last_seen_s"] = round(t_s, 6)
        th["comm"] = c.comm  # threads rename themselves after start (pt_data_worker, PTThreadPool)
        if c.cpus_allowed is not None:
            th["cpus_allowed"] = c.cpus_allowed
        cpu = c.processor
        if cpu is not None:
            th["cpu_samples"] += 1
            last = self._last_cpu[idx]
            if cpu != last:
                if last is not None:
                    th["cpu_changes"] += 1
                self._last_cpu[idx] = cpu
                if cpu not in th["cpus"]:
                    th["cpus"].append(cpu)
                    th["cpus"].sort()
        return row

    def _decimate(self) -> None:
        """Keep the first snapshot and every other one counted back from the newest; halve the rate.

        Memory stays bounded and, after the baseline, snapshots stay evenly spaced.
        """
        snaps = self._snapshots
        kept = snaps[-1:0:-2][::-1]
        self._snapshots = [snaps[0]] + kept
        self.interval_s *= 2
        self._health["decimations"] += 1

    # ------------------------------------------------------------ output

    def recording(self) -> Recording:
        """The typed recording of what was sampled so far (a copy: sampling may go on)."""
        h = dict(self._health)
        samples = h["samples"]
        read_total = h.pop("read_s_total")
        h.update(
            kept_snapshots=len(self._snapshots),
            unreadable_files=self._errors.total,
            vanished_files=self._errors.vanished,
            sampler_cpu_s=round(self._cpu_time() - self._cpu0, 6) if self._cpu0 is not None else 0.0,
            read_s_mean=round(read_total / samples, 6) if samples else None,
            read_s_max=round(h["read_s_max"], 6),
            final_interval_s=self.interval_s,
            children_fallback=self._children_fallback,
            observers_cpu_s=self._observers_cpu_s(),
        )
        return Recording(
            format=FORMAT,
            root_pid=self.root_pid,
            self_pid=self._self_pid,
            clock_ticks_per_s=self._ticks_per_s,
            interval_s=self.requested_interval_s,
            max_snapshots=self.max_snapshots,
            status_every=self.status_every,
            thread_fields=list(THREAD_FIELDS),
            processes=[Process(**p) for p in self._processes],
            # `cpus` grows in place as sampling goes on
            threads=[Thread(**{**th, "cpus": list(th["cpus"])}) for th in self._threads],
            snapshots=[Snapshot(**snap) for snap in self._snapshots],
            other_processes=self._other_processes(),
            health=Health(**h),
        )

    def _observers_cpu_s(self) -> float:
        """CPU time the observers used between the first and the last sample."""
        ticks = 0
        for pid in self._observers:
            end, start = self._others_end.get(pid), self._others_start.get(pid)
            if end is not None:
                ticks += end[2] - (start[2] if start is not None and start[1] == end[1] else 0)
        return round(ticks / self._ticks_per_s, 6)

    def _other_processes(self) -> list[OutsideProcess]:
        """Top CPU users outside the tree, the sampler and the observers, between the first and the last sample."""
        ours = {p["pid"] for p in self._processes} | {self._self_pid} | set(self._observers)
        out = []
        for pid, (comm, start, ticks) in self._others_end.items():
            if pid in ours:
                continue
            before = self._others_start.get(pid)
            base = before[2] if before is not None and before[1] == start else 0
            if ticks - base > 0:
                out.append(OutsideProcess(pid=pid, comm=comm, cpu_ticks=ticks - base))
        out.sort(key=lambda r: -r.cpu_ticks)
        return out[:OTHER_PROCESSES_KEPT]


def _wait_for(path: str, pid: int, proc_root: str, sleep: Callable[[float], None],
              poll_s: float = START_POLL_S) -> None:
    """Until `path` exists (the runner's start marker), the process exits, or a signal arrives."""
    while not os.path.exists(path) and os.path.exists(os.path.join(proc_root, str(pid))):
        t = time.monotonic()
        sleep(poll_s)
        if time.monotonic() - t < poll_s / 2:  # woken early: a signal asked us to stop
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagnose.layers.threads.sampler",
                                     description="Sample a process tree's threads through /proc.")
    parser.add_argument("--pid", type=int, required=True, help="root of the process tree to watch")
    parser.add_argument("--out", required=True, help="recording to write (JSON), atomically")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between samples")
    parser.add_argument("--max-snapshots", type=int, default=DEFAULT_MAX_SNAPSHOTS)
    parser.add_argument("--max-duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--ready", default=None, help="file to create once the first sample is taken")
    parser.add_argument("--start-when", default=None, metavar="FILE",
                        help="take the first sample only once FILE exists (the workload has begun) "
                             "or the process is gone")
    parser.add_argument("--stop-when", default=None, metavar="FILE",
                        help="take a last sample and stop once FILE exists (the workload has ended)")
    parser.add_argument("--restart-when", default=None, metavar="FILE",
                        help="drop the recording and start over, once, when FILE appears (the measured window begins)")
    parser.add_argument("--observer", type=int, action="append", default=[], metavar="PID",
                        help="a process of the measuring tool (py-spy beside it): its CPU time is not counted as "
                             "other processes' (may repeat)")
    parser.add_argument("--proc-root", default=procfs.PROC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # A signal writes to this pipe, so the sleep returns at once and the last sample
    # follows right away (time.sleep would resume its full interval, PEP 475).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    restart = {"pending": bool(args.restart_when), "now": False}

    def sleep(seconds: float) -> None:
        if not args.stop_when and not restart["pending"]:
            select.select([wake_r], [], [], seconds)
            return
        end = time.monotonic() + seconds
        while True:  # look for the markers every START_POLL_S
            if args.stop_when and os.path.exists(args.stop_when):
                sampler.stop()
                return
            if restart["pending"] and os.path.exists(args.restart_when):
                restart.update(pending=False, now=True)
                sampler.stop()
                return
            left = end - time.monotonic()
            if left <= 0 or select.select([wake_r], [], [], min(left, START_POLL_S))[0]:
                return

    def new_sampler() -> Sampler:
        return Sampler(args.pid, interval_s=args.interval, max_snapshots=args.max_snapshots,
                       proc_root=args.proc_root, sleep=sleep, observers=tuple(args.observer))

    sampler = new_sampler()
    signalled = []

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        signalled.append(signum)
        sampler.stop()

    previous_fd = signal.set_wakeup_fd(wake_w)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if args.start_when:
            if args.ready:  # watching for the start marker from now on: the workload may begin
                with open(args.ready, "w"):
                    pass
            _wait_for(args.start_when, args.pid, args.proc_root, sleep)
        elif args.ready:
            sampler.sample()
            with open(args.ready, "w"):
                pass
        recording = sampler.run(max_duration_s=args.max_duration)
        if restart["now"] and not signalled and recording.health.stopped_by == "stop":
            sampler = new_sampler()  # the window begins: what came before was setup and warm-up
            recording = sampler.run(max_duration_s=args.max_duration)
    finally:
        # leave the process as found (main() also runs inside tests)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(wake_r)
        os.close(wake_w)
    if recording.health.stopped_by == "root_not_found":
        recording = dataclasses.replace(recording,
                                        health=dataclasses.replace(recording.health, error=f"no process {args.pid}"))
    save(recording, args.out)
    if recording.health.error:
        print(f"sampler: {recording.health.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
