"""What a PID is before diagnose attaches to it, and the errors attaching meets (one line each, with the fix).

`inspect(pid)` -> Attachable, or raises an AttachError whose exit code says which case it is:
- no such process (or a zombie): UsageError, exit 2;
- another user's process, and this one may not trace it (not root, no CAP_SYS_PTRACE): exit 6;
- ptrace not permitted on it (yama's ptrace_scope, a container without CAP_SYS_PTRACE, a process that made
  itself non-dumpable): exit 5. Checked by opening /proc/PID/mem, which the kernel grants under the same
  ptrace access check py-spy's reads need;
- not a Python process (no python executable, no libpython mapped): exit 7.
A torchrun launcher (python -m torch.distributed.run, torchrun) is attachable: its ranks are its descendant
processes, each sampled (py-spy --subprocesses) and named by the RANK in its environment (`ranks`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from diagnose import procfs
from diagnose.errors import AttachError, ExitCode, UsageError

YAMA = "/proc/sys/kernel/yama/ptrace_scope"
CAP_SYS_PTRACE = 19
TORCHRUN = re.compile(r"(torch\.distributed\.(run|launch)|/torchrun\b|^torchrun$)")


class PtraceDenied(AttachError):
    exit_code = ExitCode.PTRACE_DENIED


class OtherUser(AttachError):
    exit_code = ExitCode.OTHER_USER


class NotPython(AttachError):
    exit_code = ExitCode.NOT_PYTHON


@dataclass
class Attachable:
    pid: int
    cmdline: list[str]
    cwd: str | None  # the target's working directory (None: unreadable)
    script: str  # the script it runs, as its command line names it ("-m pkg" for a module, "python" for none)
    script_args: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)
    torchrun: bool = False  # a torchrun launcher: its ranks are children
    ranks: dict[int, int] = field(default_factory=dict)  # pid -> RANK of the tree's processes that have one
    has_torch: bool = True  # libtorch is mapped (False: Python without torch loaded, yet)


def environ_of(pid: int) -> dict[str, str]:
    raw = procfs.read_text(f"/proc/{pid}/environ")
    out: dict[str, str] = {}
    for item in (raw or "").split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out


def _uid(pid: int) -> int | None:
    status = procfs.read_text(f"/proc/{pid}/status") or ""
    m = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
    return int(m.group(1)) if m else None


def _may_trace_anyone() -> bool:
    """Root with CAP_SYS_PTRACE in its effective set."""
    status = procfs.read_text(f"/proc/{os.getpid()}/status") or ""
    m = re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.MULTILINE)
    return bool(m) and bool(int(m.group(1), 16) >> CAP_SYS_PTRACE & 1)


def _yama() -> int | None:
    text = procfs.read_text(YAMA)
    return int(text.strip()) if text and text.strip().isdigit() else None


def ptrace_fix() -> str:
    scope = _yama()
    if scope is not None and scope > 0:
        return (f"yama's ptrace_scope is {scope}: run diagnose attach as root (sudo), or allow tracing with "
                f"`sudo sysctl kernel.yama.ptrace_scope=0`; in a container, start it with --cap-add SYS_PTRACE")
    return ("run diagnose attach as root (sudo) or with CAP_SYS_PTRACE; in a container, start it with "
            "--cap-add SYS_PTRACE; a process that set itself non-dumpable (prctl PR_SET_DUMPABLE 0) can only "
            "be traced by root")


def _script(cmdline: list[str]) -> tuple[str, list[str]]:
    """(the script, its arguments) from a python command line: python [-opts] script.py ARGS, python -m mod ARGS."""
    args = cmdline[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return f"-m {args[i + 1]}", args[i + 2:]
        if a == "-c":
            return "-c", args[i + 2:]
        if a.startswith("-"):
            i += 1 + (a in ("-W", "-X", "-Q"))
            continue
        return a, args[i + 1:]
    return os.path.basename(cmdline[0]) if cmdline else "python", []


def is_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    if exe.startswith(("python", "pypy")):
        return True
    maps = procfs.read_text(f"/proc/{pid}/maps") or ""
    return "libpython" in maps


def inspect(pid: int) -> Attachable:
    info = procfs.read_process(pid)
    if info is None or info.state in procfs.GONE_STATES:
        raise UsageError(f"no process {pid} (it exited, or the PID is wrong; `ps -ef | grep python` lists them)")
    uid = _uid(pid)
    root = _may_trace_anyone()
    if uid is not None and uid != os.geteuid() and not root:
        raise OtherUser(f"process {pid} belongs to another user (uid {uid}, you are uid {os.geteuid()}): run "
                        f"`sudo diagnose attach {pid}`, or attach as that user")
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
    except FileNotFoundError:
        raise UsageError(f"process {pid} exited before diagnose could attach") from None
    except PermissionError:
        raise PtraceDenied(f"ptrace is not permitted on process {pid}: {ptrace_fix()}") from None
    if not is_python(pid):
        exe = ""
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            pass
        raise NotPython(f"process {pid} ({exe or info.comm}) is not a Python process: attach to the python process "
                        f"running your script (`pstree -p {pid}` shows its children)")
    cmdline = info.cmdline or []
    script, args = _script(cmdline)
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    joined = " ".join(cmdline)
    out = Attachable(pid=pid, cmdline=cmdline, cwd=cwd, script=script, script_args=args,
                     environ=environ_of(pid), torchrun=bool(TORCHRUN.search(joined)))
    if out.torchrun:  # the user's script: torchrun's first argument naming a .py file; the rest are the script's
        at = next((i for i, a in enumerate(args) if a.endswith(".py")), None)
        if at is not None:
            out.script, out.script_args = args[at], args[at + 1:]
    out.ranks = ranks(pid)
    maps = procfs.read_text(f"/proc/{pid}/maps") or ""
    out.has_torch = "libtorch" in maps or any("libtorch" in (procfs.read_text(f"/proc/{p}/maps") or "")
                                               for p in out.ranks)
    return out


def ranks(root_pid: int) -> dict[int, int]:
    """pid -> RANK of every process of the tree whose environment has one (torchrun's ranks)."""
    out = {}
    for p in procfs.descendants(root_pid):
        rank = environ_of(p).get("RANK")
        if rank is not None and rank.isdigit() and is_python(p):
            out[p] = int(rank)
    return out


def rss_bytes(pids: list[int]) -> int | None:
    """The summed VmRSS of `pids` that still exist (None: none of them does)."""
    total, seen = 0, False
    for p in pids:
        status = procfs.read_text(f"/proc/{p}/status")
        m = re.search(r"^VmRSS:\s+(\d+)\s+kB", status or "", re.MULTILINE)
        if m:
            total += int(m.group(1)) * 1024
            seen = True
    return total if seen else None


def alive(pid: int) -> bool:
    info = procfs.read_process(pid, with_cmdline=False)
    return info is not None and info.state not in procfs.GONE_STATES
