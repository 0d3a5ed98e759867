"""Reading a process tree's threads from /proc (Linux, no privileges needed).

Contract:
- Every reader takes `proc_root` (default "/proc"), so tests point it at a
  tree written into a temporary directory; nothing is read at import time.
- A file that vanishes mid-read is normal (a thread or process exiting): the
  reader returns None and counts it in a `ReadErrors`; it never raises for it.
- Per thread (`/proc/<pid>/task/<tid>/`): `stat` gives comm, state, utime,
  stime (clock ticks), start time and the CPU it last ran on (field 39,
  `processor`); `schedstat` gives run_ns, wait_ns
  (time runnable on a run queue but not running) and timeslices (None when
  the file is absent; some kernels print `0 0 0`, which the analysis
  detects); `status` gives voluntary/nonvoluntary context switches (per
  thread: psutil's num_ctx_switches reads only the main thread) and
  Cpus_allowed_list.
- Per process: ppid, comm and start time from `/proc/<pid>/stat`, argv from
  `cmdline`. Children come from `/proc/<pid>/task/<tid>/children` of every
  thread (a child belongs to the thread that forked it); when the kernel has
  no such file (CONFIG_PROC_CHILDREN off) `ppid_map` scans every process.
- Machine: the aggregate `cpu` line of `/proc/stat` (clock ticks).

Reads use os.open/os.read: the sampler reads three files per thread per
sample, and Python file objects cost several times more per small file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PROC = "/proc"
# /proc/stat "cpu" fields, in order (see proc(5)); guest time is already inside user/nice
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
GONE_STATES = frozenset("ZX")  # zombie or dead: no longer runs anything


@dataclass
class ReadErrors:
    """Files that could not be read: `vanished` (exited mid-read) is normal, `other` is not."""

    vanished: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.vanished + self.other


@dataclass(slots=True)
class ThreadCounters:
    """Cumulative counters of one thread at one instant."""

    tid: int
    comm: str
    state: str  # R running/runnable, S sleeping, D disk wait, ... (proc(5))
    start_ticks: int  # since boot: with tid, identifies the thread across tid reuse
    utime_ticks: int
    stime_ticks: int
    run_ns: int | None  # schedstat; None when the kernel has no schedstat file
    wait_ns: int | None
    slices: int | None
    voluntary_ctxt: int | None  # status; None when status was not read or vanished
    nonvoluntary_ctxt: int | None
    cpus_allowed: str | None
    processor: int | None = None  # CPU the thread last ran on (stat field 39); None on a stat line without it


@dataclass(slots=True)
class ProcessInfo:
    pid: int
    ppid: int
    comm: str
    state: str
    start_ticks: int
    cpu_ticks: int  # utime+stime of the whole process, including its threads that have exited
    num_threads: int
    cmdline: list[str] | None  # None when unreadable or not read; [] for kernel threads and zombies


def read_text(path: str, errors: ReadErrors | None = None) -> str | None:
    """The whole (small) file, or None if it is gone or unreadable (counted in `errors`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        if errors is not None:
            errors.vanished += 1
        return None
    except OSError:
        if errors is not None:
            errors.other += 1
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 8192)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except (ProcessLookupError, FileNotFoundError):
        # reading a file of a task that exited after open() gives ESRCH
        if errors is not None:
            errors.vanished += 1
        return None
    except OSError:
        if errors is not None:
            errors.other += 1
        return None
    finally:
        os.close(fd)


def parse_stat(text: str) -> tuple[str, list[str]] | None:
    """(comm, fields from `state` on) of a stat line; comm may hold spaces and parentheses."""
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    rest = text[close_at + 2:].split()
    if len(rest) < 20:
        return None
    return text[open_at + 1:close_at], rest


# indices into parse_stat's `rest`: proc(5) field number minus 3
_STATE, _PPID, _UTIME, _STIME, _NUM_THREADS, _START, _PROCESSOR = 0, 1, 11, 12, 17, 19, 36


def list_tids(pid: int, proc_root: str = PROC, errors: ReadErrors | None = None) -> list[int]:
    try:
        names = os.listdir(f"{proc_root}/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        if errors is not None:
            errors.vanished += 1
        return []
    except OSError:
        if errors is not None:
            errors.other += 1
        return []
    return sorted(int(n) for n in names if n.isdigit())


def parse_schedstat(text: str | None) -> tuple[int, int, int] | None:
    """A schedstat file's (run_ns, wait_ns, timeslices), or None when it is absent or short."""
    parts = text.split() if text else []
    return (int(parts[0]), int(parts[1]), int(parts[2])) if len(parts) >= 3 else None


def task_sched_ns(pid: int, proc_root: str = PROC) -> dict[int, tuple[int, int]]:
    """Each thread's schedstat: tid -> (run_ns, wait_ns); {} where the kernel has no schedstat. Threads that
    exit between the listing and the read are left out."""
    out: dict[int, tuple[int, int]] = {}
    for tid in list_tids(pid, proc_root):
        sched = parse_schedstat(read_text(f"{proc_root}/{pid}/task/{tid}/schedstat"))
        if sched is not None:
            out[tid] = sched[:2]
    return out


def _field(status: str, key: str) -> str | None:
    at = status.find(key)
    if at < 0:
        return None
    end = status.find("\n", at + len(key))
    return status[at + len(key):end if end >= 0 else None].strip()


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_thread(pid: int, tid: int, proc_root: str = PROC, errors: ReadErrors | None = None,
                with_status: bool = True) -> ThreadCounters | None:
    """One thread's counters, or None when its stat is gone (the thread exited)."""
    base = f"{proc_root}/{pid}/task/{tid}"
    stat = read_text(f"{base}/stat", errors)
    parsed = parse_stat(stat) if stat is not None else None
    if parsed is None:
        return None
    comm, rest = parsed
    run_ns, wait_ns, slices = parse_schedstat(read_text(f"{base}/schedstat", errors)) or (None, None, None)
    voluntary = nonvoluntary = None
    cpus = None
    if with_status:
        status = read_text(f"{base}/status", errors)
        if status is not None:
            # "nonvoluntary_ctxt_switches:" contains "voluntary_ctxt_switches:": match the line start
            voluntary = _int_or_none(_field(status, "\nvoluntary_ctxt_switches:"))
            nonvoluntary = _int_or_none(_field(status, "\nnonvoluntary_ctxt_switches:"))
            cpus = _field(status, "\nCpus_allowed_list:")
    return ThreadCounters(
        tid=tid, comm=comm, state=rest[_STATE], start_ticks=int(rest[_START]),
        utime_ticks=int(rest[_UTIME]), stime_ticks=int(rest[_STIME]),
        run_ns=run_ns, wait_ns=wait_ns, slices=slices,
        voluntary_ctxt=voluntary, nonvoluntary_ctxt=nonvoluntary, cpus_allowed=cpus,
        processor=int(rest[_PROCESSOR]) if len(rest) > _PROCESSOR else None,
    )


def read_process(pid: int, proc_root: str = PROC, errors: ReadErrors | None = None,
                 with_cmdline: bool = True) -> ProcessInfo | None:
    """A process's identity, or None when it no longer exists."""
    stat = read_text(f"{proc_root}/{pid}/stat", errors)
    parsed = parse_stat(stat) if stat is not None else None
    if parsed is None:
        return None
    comm, rest = parsed
    cmdline = read_cmdline(pid, proc_root, errors) if with_cmdline else None
    return ProcessInfo(pid=pid, ppid=int(rest[_PPID]), comm=comm, state=rest[_STATE],
                       start_ticks=int(rest[_START]), cpu_ticks=int(rest[_UTIME]) + int(rest[_STIME]),
                       num_threads=int(rest[_NUM_THREADS]), cmdline=cmdline)


def read_cmdline(pid: int, proc_root: str = PROC, errors: ReadErrors | None = None) -> list[str] | None:
    raw = read_text(f"{proc_root}/{pid}/cmdline", errors)
    if raw is None:
        return None
    args = raw.split("\0")
    if args and args[-1] == "":
        args.pop()
    return args


def children_of(pid: int, tids: list[int], proc_root: str = PROC,
                errors: ReadErrors | None = None) -> set[int] | None:
    """Child pids of a process (forked by any of its threads); None if the kernel lacks the files."""
    out: set[int] = set()
    for tid in tids:
        path = f"{proc_root}/{pid}/task/{tid}/children"
        text = read_text(path, None)
        if text is None:
            if os.path.isdir(f"{proc_root}/{pid}/task/{tid}"):
                return None  # the thread is there but the file is not: no CONFIG_PROC_CHILDREN
            if errors is not None:
                errors.vanished += 1
            continue
        out.update(int(c) for c in text.split())
    return out


def _process_stats(proc_root: str, errors: ReadErrors | None):
    """(pid, parse_stat result) of every process readable now."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            stat = read_text(f"{proc_root}/{name}/stat", errors)
            parsed = parse_stat(stat) if stat is not None else None
            if parsed is not None:
                yield int(name), parsed


def ppid_map(proc_root: str = PROC, errors: ReadErrors | None = None) -> dict[int, int]:
    """pid -> ppid of every process: the fallback for kernels without `children` files."""
    out: dict[int, int] = {}
    for pid, parsed in _process_stats(proc_root, errors):
        out[pid] = int(parsed[1][_PPID])
    return out


def descendants(root_pid: int, proc_root: str = PROC, errors: ReadErrors | None = None) -> list[int]:
    """root_pid and every process below it that exists now, parents before children."""
    order = [root_pid]
    fallback: dict[int, list[int]] | None = None
    i = 0
    while i < len(order):
        pid = order[i]
        i += 1
        kids = None if fallback is not None else children_of(pid, list_tids(pid, proc_root, errors), proc_root, errors)
        if kids is None:
            if fallback is None:
                fallback = {}
                for child, parent in ppid_map(proc_root, errors).items():
                    fallback.setdefault(parent, []).append(child)
            kids = set(fallback.get(pid, []))
        order.extend(sorted(k for k in kids if k not in order))
    return order


def machine_cpu_ticks(proc_root: str = PROC, errors: ReadErrors | None = None) -> list[int] | None:
    """The aggregate `cpu` line of /proc/stat: CPU_FIELDS in clock ticks (older kernels print fewer)."""
    text = read_text(f"{proc_root}/stat", errors)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("cpu "):
            return [int(v) for v in line.split()[1:]]
    return None


def busy_idle_ticks(cpu: list[int]) -> tuple[int, int]:
    """(busy, idle) ticks of a /proc/stat cpu line; steal and guest count as neither."""
    named = dict(zip(CPU_FIELDS, cpu))
    busy = sum(named.get(k, 0) for k in ("user", "nice", "system", "irq", "softirq"))
    idle = named.get("idle", 0) + named.get("iowait", 0)
    return busy, idle


def all_process_ticks(proc_root: str = PROC, errors: ReadErrors | None = None) -> dict[int, tuple[str, int, int]]:
    """pid -> (comm, start_ticks, utime+stime ticks) of every process on the machine."""
    out: dict[int, tuple[str, int, int]] = {}
    for pid, (comm, rest) in _process_stats(proc_root, errors):
        out[pid] = (comm, int(rest[_START]), int(rest[_UTIME]) + int(rest[_STIME]))
    return out


def clock_ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100
