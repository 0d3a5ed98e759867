"""The thread sampler on a fake /proc tree with a fake clock (exact), and once live.

The fake tree is written into tmp_path with the files and formats the sampler
reads (proc(5)); the fake clock's sleep() advances time and fires scheduled
changes to the tree, so every sample and every number is known in advance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose import procfs
from diagnose.layers.threads import recording
from diagnose.layers.threads.analysis import analyse
from diagnose.layers.threads.recording import FORMAT, THREAD_FIELDS, ThreadRow, write_atomically
from diagnose.layers.threads.sampler import Sampler, main
from diagnose.report import io as report_io

TICKS = 100


class FakeProc:
    """A /proc tree in a folder: processes, threads with counters, children files, /proc/stat."""

    def __init__(self, root: Path, children_files: bool = True):
        self.root = root
        self.children_files = children_files
        self.procs: dict[int, dict] = {}
        self.cpu = [0] * 10  # /proc/stat cpu line
        self.write_stat()

    # -- building
    def add_process(self, pid: int, ppid: int, comm: str = "python", cmdline=("python", "x.py"), start: int = 1000,
                    threads: dict[int, dict] | None = None) -> None:
        self.procs[pid] = {"ppid": ppid, "comm": comm, "cmdline": list(cmdline), "start": start, "threads": {},
                           "children": {}}
        self.add_thread(pid, pid, comm=comm)
        for tid, values in (threads or {}).items():
            self.add_thread(pid, tid, **values)
        if ppid in self.procs:
            self.procs[ppid]["children"].setdefault(ppid, []).append(pid)
            self.write_process(ppid)
        self.write_process(pid)

    def add_thread(self, pid: int, tid: int, comm: str | None = None, state: str = "S", run_ns: int = 0,
                   wait_ns: int = 0, slices: int = 0, utime: int = 0, stime: int = 0, vcsw: int = 0, nvcsw: int = 0,
                   start: int | None = None, cpu: int | None = None) -> None:
        p = self.procs[pid]
        p["threads"][tid] = {"comm": comm or p["comm"], "state": state, "run_ns": run_ns, "wait_ns": wait_ns,
                             "slices": slices, "utime": utime, "stime": stime, "vcsw": vcsw, "nvcsw": nvcsw,
                             "start": p["start"] if start is None else start, "cpu": cpu}
        self.write_process(pid)

    def set(self, pid: int, tid: int, **values) -> None:
        self.procs[pid]["threads"][tid].update(values)
        self.write_process(pid)

    def advance(self, pid: int, tid: int, run_ns: int = 0, wait_ns: int = 0, ticks: int = 0) -> None:
        th = self.procs[pid]["threads"][tid]
        th["run_ns"] += run_ns
        th["wait_ns"] += wait_ns
        th["slices"] += 1 if run_ns else 0
        th["utime"] += ticks
        self.write_process(pid)

    def remove_thread(self, pid: int, tid: int) -> None:
        del self.procs[pid]["threads"][tid]
        self._rmtree(self.root / str(pid) / "task" / str(tid))
        self.write_process(pid)

    def remove_process(self, pid: int, reparent_to: int = 1) -> None:
        p = self.procs.pop(pid)
        self._rmtree(self.root / str(pid))
        for kids in p["children"].values():
            for kid in kids:
                if kid in self.procs:
                    self.procs[kid]["ppid"] = reparent_to
                    self.write_process(kid)
        parent = self.procs.get(p["ppid"])
        if parent:
            for kids in parent["children"].values():
                if pid in kids:
                    kids.remove(pid)
            self.write_process(p["ppid"])

    def machine(self, busy_ticks: int = 0, idle_ticks: int = 0) -> None:
        self.cpu[0] += busy_ticks
        self.cpu[3] += idle_ticks
        self.write_stat()

    # -- files
    def write_stat(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "stat").write_text("cpu  " + " ".join(map(str, self.cpu)) + "\ncpu0 0 0 0 0 0 0 0 0 0 0\nctxt 1\n")

    @staticmethod
    def _stat_line(tid, comm, state, ppid, utime, stime, num_threads, start, cpu=None) -> str:
        rest = [state, ppid, tid, tid, 0, -1, 4194560, 0, 0, 0, 0, utime, stime, 0, 0, 20, 0, num_threads, 0, start,
                0, 0, 0]
        if cpu is not None:  # up to field 39, processor (proc(5))
            rest += [0] * 12 + [17, cpu]  # exit_signal (SIGCHLD), processor
        return f"{tid} ({comm}) " + " ".join(map(str, rest)) + "\n"

    def write_process(self, pid: int) -> None:
        p = self.procs[pid]
        base = self.root / str(pid)
        (base / "task").mkdir(parents=True, exist_ok=True)
        threads = p["threads"]
        utime = sum(t["utime"] for t in threads.values())
        stime = sum(t["stime"] for t in threads.values())
        (base / "stat").write_text(self._stat_line(pid, p["comm"], threads[pid]["state"] if pid in threads else "S",
                                                   p["ppid"], utime, stime, len(threads), p["start"]))
        (base / "cmdline").write_text("\0".join(p["cmdline"]) + "\0")
        for tid, t in threads.items():
            d = base / "task" / str(tid)
            d.mkdir(exist_ok=True)
            (d / "stat").write_text(self._stat_line(tid, t["comm"], t["state"], p["ppid"], t["utime"], t["stime"],
                                                    len(threads), t["start"], t["cpu"]))
            (d / "schedstat").write_text(f"{t['run_ns']} {t['wait_ns']} {t['slices']}\n")
            (d / "status").write_text(f"Name:\t{t['comm']}\nState:\t{t['state']}\nCpus_allowed_list:\t0-1\n"
                                      f"voluntary_ctxt_switches:\t{t['vcsw']}\n"
                                      f"nonvoluntary_ctxt_switches:\t{t['nvcsw']}\n")
            if self.children_files:
                (d / "children").write_text(" ".join(map(str, p["children"].get(tid, []))))

    @staticmethod
    def _rmtree(path: Path) -> None:
        if path.exists():
            for sub in sorted(path.rglob("*"), key=lambda q: -len(q.parts)):
                sub.rmdir() if sub.is_dir() else sub.unlink()
            path.rmdir()


class FakeClock:
    """time.monotonic/time.sleep stand-ins: sleep advances time and fires the changes due by then."""

    def __init__(self):
        self.now = 100.0
        self.events: list[tuple[float, object]] = []
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def at(self, t: float, action) -> None:
        self.events.append((100.0 + t, action))
        self.events.sort(key=lambda e: e[0])

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 9))
        target = self.now + seconds
        while self.events and self.events[0][0] <= target + 1e-9:
            t, action = self.events.pop(0)
            self.now = max(self.now, t)
            action()
        self.now = max(self.now, target)  # an action may have moved time on (a stall)


def sampler_for(fake: FakeProc, clock: FakeClock, root: int = 10, **kw) -> Sampler:
    kw.setdefault("interval_s", 0.1)
    return Sampler(root, clock=clock, sleep=clock.sleep, proc_root=str(fake.root), cpu_time=lambda: 0.0,
                   self_pid=99999, clock_ticks_per_s=TICKS, **kw)


@pytest.fixture
def fake(tmp_path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


# ---------------------------------------------------------------- procfs readers


def test_read_thread_parses_stat_schedstat_status(fake):
    fake.add_process(10, 1, comm="my (odd) name", threads={11: {"comm": "PTThreadPool", "state": "R", "run_ns": 5,
                                                                 "wait_ns": 7, "slices": 2, "utime": 3, "stime": 4,
                                                                 "vcsw": 8, "nvcsw": 9}})
    c = procfs.read_thread(10, 11, str(fake.root))
    assert (c.comm, c.state, c.run_ns, c.wait_ns, c.slices, c.utime_ticks, c.stime_ticks) == (
        "PTThreadPool", "R", 5, 7, 2, 3, 4)
    assert (c.voluntary_ctxt, c.nonvoluntary_ctxt, c.cpus_allowed) == (8, 9, "0-1")
    info = procfs.read_process(10, str(fake.root))
    assert (info.comm, info.ppid, info.num_threads, info.cpu_ticks, info.cmdline) == (
        "my (odd) name", 1, 2, 7, ["python", "x.py"])


def test_read_thread_reads_the_processor_field(fake):
    fake.add_process(10, 1, threads={11: {"cpu": 3}})
    assert procfs.read_thread(10, 11, str(fake.root)).processor == 3
    assert procfs.read_thread(10, 10, str(fake.root)).processor is None  # a stat line that stops earlier


def test_vanished_files_are_counted_not_raised(fake):
    errors = procfs.ReadErrors()
    assert procfs.read_thread(10, 11, str(fake.root), errors) is None
    assert procfs.read_process(10, str(fake.root), errors) is None
    assert procfs.list_tids(10, str(fake.root), errors) == []
    assert errors.vanished == 3 and errors.other == 0


def test_descendants_through_children_files_and_ppid_fallback(tmp_path):
    for files in (True, False):
        fake = FakeProc(tmp_path / f"proc{files}", children_files=files)
        fake.add_process(10, 1)
        fake.add_process(20, 10)
        fake.add_process(30, 20)
        fake.add_process(40, 1)  # not ours
        assert procfs.descendants(10, str(fake.root)) == [10, 20, 30]


def test_busy_idle_ticks():
    assert procfs.busy_idle_ticks([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) == (1 + 2 + 3 + 6 + 7, 4 + 5)


# ---------------------------------------------------------------- sampler, exact


def test_two_threads_exact_counters_and_analysis(fake):
    fake.add_process(10, 1, threads={11: {}})
    clock = FakeClock()
    s = sampler_for(fake, clock)
    assert s.sample()
    clock.now += 0.5
    # in 0.5 s: main ran 0.4 s and waited 0.1 s, the worker ran 0.3 s and waited 0.2 s
    fake.advance(10, 10, run_ns=400_000_000, wait_ns=100_000_000, ticks=40)
    fake.advance(10, 11, run_ns=300_000_000, wait_ns=200_000_000, ticks=30)
    fake.machine(busy_ticks=90, idle_ticks=10)  # 0.9 CPU-s busy in 0.5 s: 1.8 CPUs, others 0.1
    assert s.sample()
    rec = s.recording()
    assert rec.format == FORMAT and rec.thread_fields == list(THREAD_FIELDS)
    assert [p.pid for p in rec.processes] == [10]
    assert [(t.tid, t.in_first_snapshot) for t in rec.threads] == [(10, True), (11, True)]
    assert rec.snapshots[1].threads[0][:5] == (0, "S", 400_000_000, 100_000_000, 1)
    data = json.loads(json.dumps(report_io.to_dict(rec)))  # serialisable, rows as arrays
    assert data["snapshots"][1]["threads"][0][:5] == [0, "S", 400_000_000, 100_000_000, 1]
    assert recording.from_json_data(data) == rec  # and read back as written
    t = analyse(rec, usable_cpus=2)
    assert t.duration_s == 0.5
    assert t.mean_runnable == pytest.approx(2.0)  # (0.5 + 0.5) s of runnable time / 0.5 s
    assert t.runqueue_wait_share == pytest.approx(0.3)
    assert t.cpu_used == pytest.approx(1.4)
    assert t.machine_busy_cpus == pytest.approx(1.8)
    assert t.others_cpus == pytest.approx(0.4)
    assert t.processes[0].threads == {"main": 1, "intra_op": 1}
    assert t.timeline.runnable == [pytest.approx(2.0)]


def test_cpus_each_thread_ran_on_and_its_cpu_changes(fake):
    fake.add_process(10, 1, threads={11: {"cpu": 0}, 12: {"cpu": 1}})
    clock = FakeClock()
    s = sampler_for(fake, clock)
    for cpu11 in (0, 2, 2, 0):  # thread 11 moves 0 -> 2 -> 0: two changes; 12 stays on CPU 1
        fake.set(10, 11, cpu=cpu11)
        assert s.sample()
        clock.now += 0.1
    threads = {t.tid: t for t in s.recording().threads}
    assert (threads[11].cpus, threads[11].cpu_samples, threads[11].cpu_changes) == ([0, 2], 4, 2)
    assert (threads[12].cpus, threads[12].cpu_samples, threads[12].cpu_changes) == ([1], 4, 0)
    assert (threads[10].cpus, threads[10].cpu_samples, threads[10].cpu_changes) == ([], 0, 0)
    assert threads[11].last.thread == threads[11].first.thread and isinstance(threads[11].last, ThreadRow)


def test_run_follows_children_started_and_ended_during_the_run(fake):
    fake.add_process(10, 1)
    clock = FakeClock()
    clock.at(0.15, lambda: fake.add_process(20, 10, comm="pt_data_worker", threads={21: {}}))
    clock.at(0.25, lambda: fake.advance(20, 21, run_ns=50_000_000))
    clock.at(0.35, lambda: fake.remove_process(20))
    clock.at(0.55, lambda: fake.remove_process(10))
    rec = sampler_for(fake, clock).run()
    h = rec.health
    assert h.stopped_by == "tree_exited"
    assert h.samples == 7 and h.kept_snapshots == 6  # t = 0 ... 0.5 with the tree, 0.6 without
    assert (h.missed_samples, h.late_samples) == (0, 0)
    # the worker's and the root's stat were gone when next looked for: normal exits, counted
    assert h.unreadable_files == h.vanished_files == 2
    assert clock.sleeps == [0.1] * 6
    worker = rec.processes[1]
    assert (worker.pid, worker.comm, worker.first_seen_s, worker.last_seen_s) == (
        20, "pt_data_worker", pytest.approx(0.2), pytest.approx(0.3))
    t = analyse(rec, usable_cpus=2)
    roles = {p.pid: p.role for p in t.processes}
    assert roles == {10: "target", 20: "dataloader_worker"}
    assert t.dataloader_workers == 1
    # born after the first sample: its whole 50 ms counts although it was first read at 0.2 s
    assert t.processes[1].cpu_s == pytest.approx(0.05)


def test_orphans_stay_watched_and_reused_pids_are_not(fake):
    fake.add_process(10, 1)
    fake.add_process(20, 10)
    fake.add_process(30, 20)
    clock = FakeClock()
    s = sampler_for(fake, clock)
    assert s.sample()
    fake.remove_process(20)  # 30 is re-parented to 1: still ours
    clock.now += 0.1
    assert s.sample()
    assert [pid for pid in s._alive] == [10, 30]
    fake.remove_process(30)
    fake.add_process(30, 1, start=5000)  # pid reused by a stranger
    clock.now += 0.1
    assert s.sample()
    assert list(s._alive) == [10]
    assert [p.pid for p in s.recording().processes] == [10, 20, 30]


def test_threads_exiting_and_tid_reuse(fake):
    fake.add_process(10, 1, threads={11: {"run_ns": 10}})
    clock = FakeClock()
    s = sampler_for(fake, clock)
    s.sample()
    fake.advance(10, 11, run_ns=100_000_000)
    clock.now += 0.1
    s.sample()
    fake.remove_thread(10, 11)
    fake.add_thread(10, 11, start=2000, run_ns=30_000_000)  # a new thread with the old tid
    clock.now += 0.1
    s.sample()
    rec = s.recording()
    assert [(t.tid, t.start_ticks) for t in rec.threads] == [(10, 1000), (11, 1000), (11, 2000)]
    t = analyse(rec, usable_cpus=2)
    assert t.cpu_s == pytest.approx(0.13)  # the exited thread's 0.1 s and the new one's 0.03 s
    assert t.processes[0].threads == {"main": 1, "intra_op": 2}


def test_cmdline_is_reread_when_a_child_execs(fake):
    fake.add_process(10, 1, cmdline=("python", "parent.py"))
    clock = FakeClock()
    s = sampler_for(fake, clock)
    for _ in range(4):
        s.sample()
        clock.now += 0.1
    fake.procs[10]["cmdline"] = ["python", "changed.py"]
    fake.write_process(10)
    s.sample()
    assert s.recording().processes[0].cmdline == ["python", "parent.py"]  # 3 reads, then only on exec
    fake.procs[10]["comm"] = "worker"
    fake.set(10, 10, comm="worker")
    clock.now += 0.1
    s.sample()
    p = s.recording().processes[0]
    assert (p.comm, p.cmdline, p.cmdline_reads) == ("worker", ["python", "changed.py"], 4)


def test_stop_takes_a_final_sample(fake):
    fake.add_process(10, 1)
    clock = FakeClock()
    s = sampler_for(fake, clock)
    clock.at(0.25, s.stop)
    rec = s.run()
    assert rec.health.stopped_by == "stop"
    # the fake sleep is not cut short by stop() (main() wakes the real one through a wakeup fd)
    assert [snap.t_s for snap in rec.snapshots] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert rec.health.late_samples == 0 and len(clock.sleeps) == 3


def test_late_and_missed_samples_are_counted(fake):
    fake.add_process(10, 1)
    clock = FakeClock()

    def stall():
        clock.now += 0.33  # the sampler was descheduled for 0.33 s

    clock.at(0.15, stall)
    rec = sampler_for(fake, clock).run(max_duration_s=0.95)
    h = rec.health
    assert h.stopped_by == "max_duration"
    assert h.late_samples == 1  # the sample due at 0.2 s ran at 0.48 s
    assert h.missed_samples == 2  # slots 0.3 and 0.4 had passed by then
    times = [snap.t_s for snap in rec.snapshots]
    assert times == pytest.approx([0.0, 0.1, 0.48, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


def test_decimation_bounds_memory_and_keeps_totals_exact(fake):
    fake.add_process(10, 1)
    clock = FakeClock()
    for k in range(1, 40):
        clock.at(k * 0.1 - 0.05, lambda: fake.advance(10, 10, run_ns=50_000_000, wait_ns=10_000_000))
    # samples at 0.0 ... 0.7 (8: the cap), then every 0.2 s, then every 0.4 s
    rec = sampler_for(fake, clock, max_snapshots=8).run(max_duration_s=2.05)
    h = rec.health
    assert h.decimations == 2 and len(rec.snapshots) < 8
    assert h.final_interval_s == pytest.approx(0.4)
    times = [snap.t_s for snap in rec.snapshots]
    # the first snapshot (the baseline) and every other one counted back from the newest
    assert times == pytest.approx([0.0, 0.1, 0.5, 0.9, 1.3, 1.7, 2.1])
    t = analyse(rec, usable_cpus=2)
    end = rec.snapshots[-1].t_s
    advances = sum(1 for k in range(1, 40) if k * 0.1 - 0.05 <= end)
    assert t.cpu_s == pytest.approx(0.05 * advances)
    assert t.wait_s == pytest.approx(0.01 * advances)


def test_cpu_budget_slows_the_sampler_down(fake):
    fake.add_process(10, 1)
    clock = FakeClock()
    s = Sampler(10, interval_s=0.1, clock=clock, sleep=clock.sleep, proc_root=str(fake.root),
                cpu_time=lambda: 0.05 * clock.now,  # the sampler uses 5% of a CPU: over its 2% budget
                self_pid=99999, clock_ticks_per_s=TICKS)
    rec = s.run(max_duration_s=2.95)
    h = rec.health
    assert h.slowdowns == 1 and h.final_interval_s == pytest.approx(0.2)  # 20 samples, then doubled
    assert [snap.t_s for snap in rec.snapshots][19:22] == pytest.approx([1.9, 2.1, 2.3])


def test_schedstat_zero_falls_back_to_states_and_ticks(fake):
    fake.add_process(10, 1, threads={11: {}})
    clock = FakeClock()

    def busy():
        fake.set(10, 10, state="R")
        fake.set(10, 11, state="R")
        fake.advance(10, 10, ticks=10)  # 0.1 s of CPU per interval, schedstat stays 0 0 0
        fake.advance(10, 11, ticks=5)

    for k in range(10):
        clock.at(k * 0.1 + 0.05, busy)
    rec = sampler_for(fake, clock).run(max_duration_s=0.95)
    t = analyse(rec, usable_cpus=2)
    assert t.schedstat_available is False and t.method == "state_sampling"
    # both threads seen R in the 10 samples after the first: 2 x 10 x 0.1 s over 1.0 s
    assert t.mean_runnable == pytest.approx(2.0)
    assert t.cpu_used == pytest.approx(1.5)
    assert t.runqueue_wait_share == pytest.approx(0.25)
    # status was read every sample while schedstat showed nothing
    assert rec.threads[0].last.voluntary_ctxt is not None


def test_status_is_read_every_few_samples_once_schedstat_works(fake, monkeypatch):
    fake.add_process(10, 1, threads={11: {"run_ns": 5}})
    calls = []
    real = procfs.read_thread

    def spy(pid, tid, proc_root, errors=None, with_status=True):
        calls.append(with_status)
        return real(pid, tid, proc_root, errors, with_status)

    monkeypatch.setattr(procfs, "read_thread", spy)
    clock = FakeClock()
    s = sampler_for(fake, clock, status_every=5)
    for _ in range(10):
        s.sample()
        clock.now += 0.1
    s.sample(final=True)
    per_sample = [calls[i] for i in range(0, len(calls), 2)]
    assert per_sample == [True, False, False, False, False, True, False, False, False, False, True]


def test_root_not_found(fake):
    rec = sampler_for(fake, FakeClock(), root=4242).run()
    assert rec.health.stopped_by == "root_not_found" and rec.snapshots == []
    t = analyse(rec, usable_cpus=2)
    assert t.mean_runnable is None and t.reason


def test_main_writes_the_recording_atomically(fake, tmp_path):
    out = tmp_path / "out" / "rec.json"
    out.parent.mkdir()
    assert main(["--pid", "4242", "--out", str(out), "--proc-root", str(fake.root)]) == 1
    rec = recording.load(str(out))
    assert rec.health.error == "no process 4242"
    assert os.listdir(out.parent) == ["rec.json"]
    fake.add_process(10, 1)
    ready = tmp_path / "ready"
    assert main(["--pid", "10", "--out", str(out), "--interval", "0.02", "--max-duration", "0.1",
                 "--ready", str(ready), "--proc-root", str(fake.root)]) == 0
    rec = recording.load(str(out))
    assert ready.exists() and rec.health.stopped_by == "max_duration" and len(rec.snapshots) >= 2


def test_write_atomically_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "r.json"
    write_atomically(str(target), {"format": FORMAT})
    with pytest.raises(TypeError):
        write_atomically(str(target), {"bad": object()})
    assert json.loads(target.read_text()) == {"format": FORMAT}
    assert os.listdir(tmp_path) == ["r.json"]


# ---------------------------------------------------------------- live, overwhelming signal only

BUSY = """
import hashlib, sys, threading, time
data = b"x" * (1 << 20)
go = threading.Event()
def spin():
    go.wait()
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        hashlib.sha256(data).digest()  # releases the GIL: threads really run in parallel
threads = [threading.Thread(target=spin) for _ in range(int(sys.argv[1]))]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
for t in threads:
    t.join()
"""


def test_live_threads_spinning_on_few_cpus_show_oversubscription(tmp_path):
    usable = len(os.sched_getaffinity(0))
    n_threads = 4 * usable
    out, ready = tmp_path / "live.json", tmp_path / "ready"
    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(n_threads), "1.0"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    sampler = None
    try:
        assert busy.stdout.readline().strip() == "ready"
        # the sampler attaches to the running process; the threads spin once it has its first sample
        sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(busy.pid),
                                    "--out", str(out), "--interval", "0.05", "--ready", str(ready)],
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not ready.exists() and sampler.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        busy.stdin.write("go\n")
        busy.stdin.flush()
        assert sampler.wait(timeout=30) == 0, sampler.stderr.read()
    finally:
        for proc in (busy, sampler):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    rec = recording.load(str(out))
    assert rec.health.stopped_by == "tree_exited"
    t = analyse(rec, usable_cpus=usable)
    assert t.processes[0].max_threads == n_threads + 1
    assert t.schedstat_available  # this project's machines have scheduler statistics
    assert t.runqueue_wait_share > 0.2
    assert t.mean_runnable > usable + 1


def test_live_sigterm_stops_the_sampler_at_once_and_writes(tmp_path):
    out, ready = tmp_path / "term.json", tmp_path / "ready"
    target = subprocess.Popen(["sleep", "30"])
    sampler = None
    try:
        sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(target.pid),
                                    "--out", str(out), "--interval", "5", "--ready", str(ready)])
        deadline = time.monotonic() + 20
        while not ready.exists() and sampler.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = time.monotonic()
        sampler.terminate()
        assert sampler.wait(timeout=20) == 0
        # a 5 s interval: only a sleep woken by the signal ends this soon
        assert time.monotonic() - sent < 3.0
    finally:
        for proc in (target, sampler):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    rec = recording.load(str(out))
    assert rec.health.stopped_by == "stop" and len(rec.snapshots) == 2
    assert rec.processes[0].comm == "sleep"


def test_live_start_and_stop_markers_bound_the_recording(tmp_path):
    """The runner's markers: sampling begins when `started` appears and ends when `stopped` does."""
    out, start, stop = tmp_path / "marked.json", tmp_path / "started", tmp_path / "stopped"
    ready = tmp_path / "ready"
    target = subprocess.Popen(["sleep", "30"])
    sampler = None
    try:
        sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(target.pid),
                                    "--out", str(out), "--interval", "0.05", "--start-when", str(start),
                                    "--stop-when", str(stop), "--ready", str(ready)])
        deadline = time.monotonic() + 60  # its interpreter's start: seconds on a loaded machine
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the sampler never got ready"
        time.sleep(2.0)
        assert sampler.poll() is None and not out.exists()  # still waiting for the start marker
        start.touch()
        time.sleep(1.5)
        stop.touch()
        assert sampler.wait(timeout=20) == 0
        assert target.poll() is None  # it stopped at the marker, not because the target ended
    finally:
        for proc in (target, sampler):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    rec = recording.load(str(out))
    assert rec.health.stopped_by == "stop"
    span = rec.snapshots[-1].t_s - rec.snapshots[0].t_s
    # the 1.5 s between the markers (each seen up to a second late on a loaded machine), not the 2 s before
    assert 0.5 < span < 3.4, span


def test_scheduling_over_a_busy_window_counts_its_runnable_time_and_a_new_thread_from_zero():
    """runner._scheduling from real /proc/self/task/*/schedstat: a thread started inside the window counts from
    zero, and a busy loop is runnable (on a CPU or waiting for one) for the whole of its 80 ms, so run + wait
    covers at least 50 ms of it whatever else the machine runs (a running thread's count lags by up to a tick)."""
    import threading
    import time

    from diagnose import runner

    before = procfs.task_sched_ns(os.getpid())
    if not any(run or wait for run, wait in before.values()):
        pytest.skip("this kernel's scheduler statistics are off (schedstat reads 0 0 0)")
    done = threading.Event()
    worker = threading.Thread(target=done.wait)
    worker.start()
    end = time.perf_counter() + 0.08
    while time.perf_counter() < end:
        pass
    after = procfs.task_sched_ns(os.getpid())
    done.set()
    worker.join()
    assert worker.native_id in after and worker.native_id not in before
    s = runner._scheduling(before, after)  # noqa: SLF001
    assert s is not None and s.run_s + s.wait_s >= 0.05 and 0.0 <= s.wait_share <= 1.0
    assert runner._scheduling(before, {}) is None  # noqa: SLF001 - no schedstat here
