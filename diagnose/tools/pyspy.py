"""py-spy: where it is, the `record` command line, and its chrometrace output read back as timed stacks.

Contract
- `executable()`: the py-spy binary beside this interpreter (a venv's bin/, where `pip install py-spy` puts it),
  else on PATH; None when neither has it.
- `version(exe)`: "py-spy 0.4.3" (its --version line), None when it does not answer.
- `record_command(exe, pid, out, rate_hz, duration_s)`: `py-spy record --pid PID --native --idle --subprocesses
  --threads --format chrometrace --rate HZ --duration S -o OUT`. --native puts the C++ frames (the ATen operator,
  at::_ops::<op>::call, and the BLAS/OpenMP frames below it) under the Python ones; it needs py-spy to pause
  each thread while it unwinds (py-spy refuses --native with --nonblocking). --idle keeps the samples of
  waiting threads: chrometrace merges consecutive identical stacks into one span, and without the idle
  samples a span would run on across the time its thread waited (measured: a loop busy half the time showed
  as busy 88% of it). --subprocesses follows the process tree (DataLoader workers, torchrun's ranks).
- `read_chrometrace(path)` -> list[Span]: per thread, the stack held from one sample to the next change
  (`start_us`, `dur_us`), root first. py-spy writes a B event per frame that appears and an E event per frame
  that goes, all at the sample's timestamp; a frame is Python when its file is a source file (`.py`,
  `<frozen ...>`) with a line, native otherwise (a shared object, line 0). A span's duration is the time
  until its thread's next change, so with --idle it is that stack's sampled time.
- `failure(stderr)`: py-spy's error output classified: "permission" (ptrace or memory reads denied),
  "not_python" (no Python interpreter found in the process), "gone" (no such process), or None.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import NamedTuple


class Frame(NamedTuple):
    name: str  # Python: its qualified name ("Module._call_impl"); native: its symbol, or 0x... when unsymbolised
    file: str  # Python: the source file; native: the shared object ("" for py-spy's own thread-name frames)
    line: int  # Python: the line; native: 0

    @property
    def python(self) -> bool:
        return self.line > 0 and (self.file.endswith(".py") or self.file.startswith("<"))


class Span(NamedTuple):
    pid: int
    tid: int  # the OS thread id from py-spy's "thread (TID): NAME" label (--threads), else its pthread id
    start_us: int  # py-spy's clock: microseconds since it started
    dur_us: int  # until the thread's next stack change (or the end)
    frames: tuple[Frame, ...]  # root first
    thread: str = ""  # the Python thread's name ("MainThread"), "" when py-spy gave none


THREAD_LABEL = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)(?::\s*(.*))?$")


def executable() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def record_command(exe: str, pid: int, out: str, rate_hz: float, duration_s: float) -> list[str]:
    return [exe, "record", "--pid", str(pid), "--native", "--idle", "--subprocesses", "--threads",
            "--format", "chrometrace",
            "--rate", str(max(1, round(rate_hz))), "--duration", str(max(1, round(duration_s))), "-o", out]


def read_chrometrace(path: str) -> list[Span]:
    with open(path, encoding="utf-8") as fh:
        events = json.load(fh)
    return spans(events)


def spans(events: list[dict]) -> list[Span]:
    """Timed stacks from py-spy's chrometrace events (module docstring)."""
    stacks: dict[tuple[int, int], list[Frame]] = {}
    since: dict[tuple[int, int], int] = {}
    out: list[Span] = []
    for e in events:
        ph = e.get("ph")
        if ph not in ("B", "E"):
            continue
        key = (int(e.get("pid", 0)), int(e.get("tid", 0)))
        ts = int(e.get("ts", 0))
        stack = stacks.setdefault(key, [])
        start = since.get(key)
        if start is not None and ts > start and stack:  # the stack held until now: close that span
            frames = tuple(f for f in stack if f.file or f.line)  # drop py-spy's "thread (...)" label frames
            label = next((m for f in stack if not f.file and (m := THREAD_LABEL.match(f.name))), None)
            if frames:
                tid = int(label.group(1), 0) if label else key[1]
                out.append(Span(key[0], tid, start, ts - start, frames, (label.group(2) or "") if label else ""))
        since[key] = ts
        if ph == "B":
            args = e.get("args") or {}
            stack.append(Frame(str(e.get("name", "")), str(args.get("filename") or ""), int(args.get("line") or 0)))
        elif stack:
            stack.pop()
    out.sort(key=lambda s: (s.pid, s.tid, s.start_us))
    return out


def failure(stderr: str) -> str | None:
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text or "eperm" in text:
        return "permission"
    if "no such process" in text or "failed to find process" in text or "process not found" in text:
        return "gone"
    if "python" in text and ("failed to find" in text or "not a python" in text or "couldn't find" in text
                             or "failed to get" in text):
        return "not_python"
    return None
