"""The thread sampler's recording: the types the sampler writes and the layer reads back.

The sampler (sampler.py) runs in a process of its own and hands its
recording to the parent as a JSON file (FORMAT); analysis.py turns it into
the report's `threads` section. The types here are that file, field for
field: `save` writes them with report/io.py's `to_dict`, `load` reads them
back with `typed`, so the two sides cannot drift apart. They are frozen: the
analysis reads a recording, never edits it.

Thread rows (`ThreadRow`, `ProcessRow`) stay JSON arrays on disk, their
columns named by `thread_fields` (THREAD_FIELDS): a long run keeps up to
`max_snapshots` snapshots of every thread, and arrays keep the file small
and the sampler's hot loop cheap (it builds plain lists; the rows become
named tuples when a `Snapshot` or `Thread` is built, at write time).

Format history ("diagnose.threads/1" throughout; fields were only added, so
older recordings load with the defaults below):
- per process `cmdline_reads`, per thread `cpus`, `cpu_samples` and
  `cpu_changes`: added later (the recordings under tests/data/threads
  predate them);
- `health.tree_gone_s`: written only when a sample found the tree gone,
  null otherwise since the recording is typed.

Times `*_s` are seconds since the first sample; all counters are cumulative.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from diagnose.report.io import to_dict, typed

FORMAT = "diagnose.threads/1"


class ThreadRow(NamedTuple):
    """One thread at one sample; null where a file was absent."""

    thread: int  # index into Recording.threads
    state: str  # R running or runnable, S sleeping, D disk wait, ... (proc(5))
    run_ns: int | None  # schedstat: time on a CPU
    wait_ns: int | None  # schedstat: time on a run queue
    slices: int | None  # schedstat: timeslices run
    utime_ticks: int | None
    stime_ticks: int | None
    # status is read every few samples: the sampler carries the last values it read into the rows between
    voluntary_ctxt: int | None
    nonvoluntary_ctxt: int | None
    # the current interval added each time the thread was seen in state R (the fallback when schedstat reads 0 0 0)
    runnable_sampled_ms: float


THREAD_FIELDS: tuple[str, ...] = ThreadRow._fields


class ProcessRow(NamedTuple):
    """One process of the tree at one sample."""

    process: int  # index into Recording.processes
    cpu_ticks: int  # utime+stime of the whole process, threads that have exited included
    num_threads: int


def _rows(rows: list, row: type) -> list:
    return [r if isinstance(r, row) else row(*r) for r in rows]


@dataclass(frozen=True)
class Snapshot:
    """One kept sample (decimation drops every other one on long runs; the first stays)."""

    t_s: float
    cpu: list[int] | None = None  # the /proc/stat cpu line in clock ticks; None when unreadable
    procs: list[ProcessRow] = field(default_factory=list)
    threads: list[ThreadRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        # arrays from JSON (or the sampler's lists) become named rows; frozen, hence object.__setattr__
        object.__setattr__(self, "procs", _rows(self.procs, ProcessRow))
        object.__setattr__(self, "threads", _rows(self.threads, ThreadRow))


@dataclass(frozen=True)
class Process:
    """A process of the watched tree, as last read."""

    pid: int
    ppid: int | None = None
    comm: str = ""  # changes at exec
    cmdline: list[str] | None = None  # None: never read; [] for kernel threads and zombies
    start_ticks: int = 0  # since boot: with pid, identifies the process across pid reuse
    first_seen_s: float = 0.0
    last_seen_s: float = 0.0
    max_threads: int = 0  # most threads read in one sample
    cmdline_reads: int = 0  # argv is read on the first few sightings and when comm changes


@dataclass(frozen=True)
class Thread:
    """A thread of the tree over the run; its first and last readings are kept apart from decimation."""

    process: int  # index into Recording.processes
    pid: int
    tid: int
    comm: str = ""  # threads rename themselves after start (pt_data_worker, PTThreadPool)
    start_ticks: int = 0  # with (pid, tid), identifies the thread across tid reuse
    cpus_allowed: str | None = None  # its affinity list, e.g. "0-1"
    first_seen_s: float = 0.0
    last_seen_s: float = 0.0
    in_first_snapshot: bool = False  # False: born during the run, its counters count from zero
    first: ThreadRow | None = None
    last: ThreadRow | None = None
    # from the `processor` field of its stat, at every sample (decimation drops none of them)
    cpus: list[int] = field(default_factory=list)  # the CPUs it was seen on, sorted
    cpu_samples: int = 0  # samples that read its CPU
    # times it was on another CPU than at the previous sample that read it: a lower bound of its migrations
    cpu_changes: int = 0

    def __post_init__(self) -> None:
        for name in ("first", "last"):
            row = getattr(self, name)
            if row is not None and not isinstance(row, ThreadRow):
                object.__setattr__(self, name, ThreadRow(*row))


@dataclass(frozen=True)
class OutsideProcess:
    """A process outside the tree and the sampler that used CPU between the first and the last sample."""

    pid: int
    comm: str = ""
    cpu_ticks: int = 0


@dataclass(frozen=True)
class Health:
    """How the sampling went."""

    samples: int = 0  # a last one that found the tree gone included
    kept_snapshots: int = 0  # after decimations
    late_samples: int = 0  # began more than half an interval after their slot
    missed_samples: int = 0  # slots that passed while a sample ran late
    unreadable_files: int = 0  # vanished_files included
    vanished_files: int = 0  # the thread or process had exited
    sampler_cpu_s: float = 0.0  # the sampler's own CPU time
    observers_cpu_s: float = 0.0  # the observers' (--observer: py-spy, diagnose attach) between first and last sample
    read_s_mean: float | None = None  # one sample's reading time; None: no sample
    read_s_max: float = 0.0
    decimations: int = 0  # times the kept snapshots were halved (and the interval doubled)
    slowdowns: int = 0  # times the interval was doubled to keep within the CPU budget
    final_interval_s: float | None = None
    children_fallback: bool = False  # no `children` files: descendants found through every process's ppid
    stopped_by: str | None = None  # tree_exited, stop, max_duration, root_not_found
    tree_gone_s: float | None = None  # the first sample that found no process of the tree
    error: str | None = None  # "no process PID"


@dataclass(frozen=True)
class Recording:
    """What the sampler saw of one process tree (FORMAT)."""

    format: str
    root_pid: int
    self_pid: int | None = None  # the sampler's own pid: never counted
    clock_ticks_per_s: int = 100
    interval_s: float | None = None  # requested; the current one grows with decimations and slowdowns
    max_snapshots: int | None = None
    status_every: int | None = None  # status is read every this many samples once schedstat works
    thread_fields: list[str] = field(default_factory=lambda: list(THREAD_FIELDS))
    processes: list[Process] = field(default_factory=list)
    threads: list[Thread] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    other_processes: list[OutsideProcess] = field(default_factory=list)  # the top CPU users outside the tree
    health: Health = field(default_factory=Health)


def from_json_data(data: Any) -> Recording:
    """A recording from its JSON data; ValueError when it is not one this code can read."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith("diagnose.threads/"):
        raise ValueError(f"not a thread-sampler recording (format {fmt!r})")
    columns = data.get("thread_fields")
    if columns is not None and tuple(columns) != THREAD_FIELDS:
        raise ValueError(f"thread rows with columns {columns}, this diagnose reads {list(THREAD_FIELDS)}")
    return typed(Recording, data)


def load(path: str) -> Recording:
    with open(path, encoding="utf-8") as fh:
        return from_json_data(json.load(fh))


def save(recording: Recording, path: str) -> None:
    write_atomically(path, to_dict(recording))


def write_atomically(path: str, data: Any) -> None:
    """JSON `data` to `path` through a temporary file in the same folder: a reader never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".threads-", suffix=".json.tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it 0600; give it a normal file's mode
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
