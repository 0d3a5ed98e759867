"""Python layer: a cProfile pass, its call graph, and where Python time goes.

Child side (`PythonRecorder`) runs the measured part of the workload under
cProfile and saves `profile.pstats`. Parent side (`PythonLayer.analyse`)
reads it back with `pstats`, renders `callgraph.dot` with gprof2dot and
`callgraph.png` with graphviz's `dot` (tools/callgraph.py), and fills
`python_hotspots` and `python_summary`:
- every function is classed `user` (the user's files, see usercode.py),
  `library` (other Python: torch's Python layers, stdlib), `torch` (a torch
  built-in: time spent in it is operator work, including intra-op threads the
  caller waits for), `wait` (a built-in that blocks: sleep, a lock, a pipe or
  socket read, select/poll, waiting for a child process: the process is idle,
  which is neither Python nor operator work) or `builtin` (any other C
  function);
- the run's split into operator work vs Python between operators is the sum
  of self times per class;
- per user function, `loop_overhead_s` is its own time plus the time of the
  tiny calls (< TINY_CALL_US each, on average) it makes directly: the cost of
  driving torch one small step at a time from Python. Joined with the operator
  pass, each user function lists the operators called from its lines;
- beside cProfile, OwnTimeSampler samples what the user's lines do in their
  own frames (bytecode, C slot operations, calls): cProfile books slot
  operations (`a @ b`, torch's or numpy's) and calls it sees no call for
  (numpy.random's Cython methods) to the calling function's own time, and the
  samples tell operator work and numpy's work from Python, line by line
  (correct_hidden_operators).

cProfile slows Python code far more than operator code, so these shares
overstate Python; the summary gives this pass's wall time beside the
uninstrumented one.
"""

from __future__ import annotations

import dataclasses
import os
import pstats
import re
import sys
import threading
import time
from collections import defaultdict
from typing import Any

from diagnose.config import CallgraphOptions
from diagnose.layers.base import Layer, Recorder
from diagnose.protocol import PassSpec, iteration_stats
from diagnose.report import io as report_io
from diagnose.report.model import (
    CallgraphSettings,
    LayerStatus,
    LineOperator,
    OwnLine,
    OwnTime,
    PythonFunction,
    PythonSplit,
    PythonSummary,
    Report,
)
from diagnose.tools import callgraph
from diagnose.usercode import CALL_OPCODES, SLOT_OPCODES, FunctionSpans, UserCode, torch_root

PSTATS = "profile.pstats"
DOT = "callgraph.dot"
PNG = "callgraph.png"
TINY_CALL_US = 50.0
TOP_BY_SELF = 30
USER_MIN_CUMULATIVE_PCT = 1.0
MAX_OPERATORS_PER_FUNCTION = 8
# OwnTimeSampler: the main thread every 2 ms (500 a second: +3.5-5.8% of a step, about cProfile's own cost on the
# same steps, benchmarks/own_time_overhead.py);
# a sample stands for the time since the one before, at most OWN_SAMPLE_CAP periods (the GIL held by a C call
# delays a sample, and that time is not the line's found after it); under OWN_MIN_SAMPLES (0.1 s of a pass), not
# used: examples/graph_breaks.py's whole call-graph pass is 0.14 s; what moves on the samples is known to their
# sampling error besides the run's noise (PythonFunction.moved_noise_s)
OWN_SAMPLE_S = 0.002
# the interpreter's switch interval while sampling (default 5 ms): Python holding the GIL yields it to the sampler
# within this, at the instruction it is running. A Python stretch shorter than it is not sampled, and its time goes
# to the next line that releases the GIL: tests/data/python/own_time.py's loop of 0.7 ms of Python between a numpy
# `@` and a numpy.random call read 0% Python at 5 ms, 13% at 0.5 ms and 31% at 0.1 ms, where timed it is 33%
OWN_SWITCH_S = 0.0001
OWN_SAMPLE_CAP = 5
OWN_MIN_SAMPLES = 50
# while the main thread used under OWN_IDLE_CPU of a CPU since the last sample (blocked), the period doubles up to
# OWN_IDLE_S: a script hung under this pass must look idle to the stall detector (stall.py, 2% of a CPU)
OWN_IDLE_CPU = 0.05
OWN_IDLE_S = 0.1
OWN_LINES_MAX = 200
# cProfile's own cost per profiled call: 0.31 µs measured here (a trivial function called 1 M times), taken
# x3 for what it costs real code (caches): a bound, used to tell cProfile's slowdown from a slow pass
CPROFILE_CALL_US = 1.0


class PythonRecorder(Recorder):
    """cProfile over the measured part of the workload.

    In script mode the window begins and ends inside the script's loop, so
    cProfile never sees the frame running the loop (the script's `<module>`,
    or the function holding the loop) being entered: its own time and its
    calls would be missing. The recorder finds that frame (the innermost one
    on the stack both when recording starts and when it stops) and adds it to
    the stats as what it is: the caller of every function cProfile saw start
    at the top, with the window's time not spent in them as its own time.
    """

    def __init__(self, spec: PassSpec):
        self.spec = spec
        self.profiler = None
        self.sampler: OwnTimeSampler | None = None
        self.usercode: UserCode | None = None
        self.start_frames: dict[int, Any] = {}
        self.loop_frame = None
        self.t0 = 0.0
        self.wall_s = 0.0
        self.skipped: str | None = None  # why nothing was recorded

    def start(self) -> None:
        import cProfile

        if self.sampler is not None:  # a window began: start over
            self.sampler.stop()
        if sys.getprofile() is not None:
            # the script profiles itself (its own cProfile, a profiler hook): replacing its hook would change
            # what it measures and prints, so this pass records nothing and says why
            self.sampler = None
            self.skipped = ("the script runs its own Python profiler (sys.setprofile is taken, e.g. its own "
                            "cProfile): the call-graph pass leaves it alone and records nothing")
            self.profiler = None
            return
        self.skipped = None
        self.profiler = cProfile.Profile()
        self.start_frames = _stack(sys._getframe(1)) if self.spec.mode == "script" else {}
        self.usercode = self.usercode or UserCode(self.spec.script, cwd=self.spec.cwd)
        self.sampler = OwnTimeSampler(self.usercode)
        self.sampler.start()
        self.t0 = time.perf_counter()
        self.profiler.enable()

    def stop(self) -> None:
        if self.profiler is not None and sys.getprofile() is not self.profiler:
            # the script started its own profiler while this one recorded: disabling ours now would switch
            # off the script's (one profile hook per thread), so it is left running and nothing is kept
            self.profiler, self.skipped = None, ("the script started its own Python profiler while the call-graph "
                                                 "pass recorded (e.g. its own cProfile): the pass left it alone and "
                                                 "kept nothing")
        if self.sampler is not None:
            self.sampler.stop()
        if self.profiler is not None:
            self.profiler.disable()
            self.wall_s = time.perf_counter() - self.t0
            self.loop_frame = _innermost_common(sys._getframe(1), self.start_frames)
            self.start_frames = {}

    def collect(self, workdir: str) -> dict[str, Any]:
        if self.profiler is None:
            return {"pstats": None, "skipped": self.skipped}
        stats = pstats.Stats(self.profiler)
        root = None
        if self.loop_frame is not None:
            root = add_loop_frame(stats.stats, self.loop_frame, self.wall_s)
            self.loop_frame = None
        stats.dump_stats(os.path.join(workdir, PSTATS))
        own = self.sampler.result() if self.sampler is not None else None
        return {"pstats": PSTATS, "callgraph": report_io.to_dict(self.spec.callgraph), "root": root,
                "own_time": report_io.to_dict(own) if own is not None else None}


_SWITCH_BEFORE: float | None = None  # the switch interval a running OwnTimeSampler replaced


def _restore_switch_in_child() -> None:
    """A process the script forks while the sampler runs (a DataLoader worker) has no sampler: it gets the
    interpreter's switch interval back."""
    if _SWITCH_BEFORE is not None:
        sys.setswitchinterval(_SWITCH_BEFORE)


os.register_at_fork(after_in_child=_restore_switch_in_child)


class OwnTimeSampler:
    """Samples what the main thread's innermost frame executes while the call-graph pass records, when that frame
    is the user's: its own bytecode (Python), a C slot operation (SLOT_OPCODES: `a @ b`, `x[i]`; cProfile sees no
    call there, so their time is in the function's self time), or a call (CALL_OPCODES: in a C callee, whose time
    cProfile books to the callee if it sees the call: not for a Cython method such as numpy.random's, nor for a
    C type). A C function that releases the GIL (a torch operator, numpy's BLAS) is sampled as it runs; Python
    holding the GIL yields it to this thread within the switch interval, which it sets to OWN_SWITCH_S while it
    samples (the pass's other threads then switch as often: this pass is instrumented anyway, and the
    uninstrumented and operator passes keep the default)."""

    def __init__(self, usercode: UserCode, period_s: float = OWN_SAMPLE_S) -> None:
        self.usercode, self.period_s = usercode, period_s
        self.main = threading.get_ident()  # the thread that runs the window (start() is called on it)
        # (filename, first line, name: cProfile's key of the function) + (line,) -> [python s, slot s, call s]
        self.lines: dict[tuple[str, int, str, int], list[float]] = {}
        self.samples, self.sampled_s = 0, 0.0
        self._switch = sys.getswitchinterval()
        self._user: dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="diagnose-own-time", daemon=True)

    def start(self) -> None:
        global _SWITCH_BEFORE
        self._switch = _SWITCH_BEFORE = sys.getswitchinterval()
        sys.setswitchinterval(OWN_SWITCH_S)
        self._thread.start()

    def stop(self) -> None:
        global _SWITCH_BEFORE
        self._stop.set()
        self._thread.join(timeout=1.0)
        sys.setswitchinterval(self._switch)
        _SWITCH_BEFORE = None

    def _run(self) -> None:
        current, clock = sys._current_frames, time.perf_counter
        try:  # the main thread's own CPU clock: a blocked main thread is not sampled at full rate
            cpu_clock = time.pthread_getcpuclockid(self.main)
            cpu_last = time.clock_gettime(cpu_clock)
        except (AttributeError, OSError):
            cpu_clock, cpu_last = None, 0.0
        period = self.period_s
        last = clock()
        while not self._stop.wait(period):
            frame = current().get(self.main)  # noqa: SLF001 - the main thread's innermost frame
            now = clock()
            elapsed = now - last
            weight, last = min(elapsed, OWN_SAMPLE_CAP * period), now
            if frame is None:
                return
            if cpu_clock is not None:
                try:
                    cpu = time.clock_gettime(cpu_clock)
                except OSError:  # the main thread is gone
                    return
                # back off while the main thread waits (a hang, a queue): a blocked script must not look busy
                # to the stall detector (stall.py: 2% of a CPU), as loops.py's finder backs off
                idle, cpu_last = cpu - cpu_last < OWN_IDLE_CPU * elapsed, cpu
                period = min(2 * period, OWN_IDLE_S) if idle else self.period_s
            self.samples += 1
            self.sampled_s += weight
            code, lasti, line = frame.f_code, frame.f_lasti, frame.f_lineno
            del frame  # no reference to the main thread's frame (its locals) kept between samples
            user = self._user.get(code.co_filename)
            if user is None:
                user = self._user[code.co_filename] = self.usercode.is_user(code.co_filename)
            if not user:
                continue
            op = code.co_code[lasti]  # f_lasti: the instruction it is executing
            key = (code.co_filename, code.co_firstlineno, code.co_name, line or 0)
            acc = self.lines.get(key)
            if acc is None:
                acc = self.lines[key] = [0.0, 0.0, 0.0]
            acc[2 if op in CALL_OPCODES else 1 if op in SLOT_OPCODES else 0] += weight

    def result(self) -> OwnTime:
        lines = sorted(self.lines.items(), key=lambda kv: -sum(kv[1]))[:OWN_LINES_MAX]
        return OwnTime(period_s=self.period_s, samples=self.samples, sampled_s=round(self.sampled_s, 6),
                       numpy_loaded="numpy" in sys.modules,
                       lines=[OwnLine(location=f"{self.usercode.display(path)}:{line}", function=name,
                                      defined_at=f"{self.usercode.display(path)}:{first}", python_s=round(py, 6),
                                      slot_s=round(slot, 6), call_s=round(call, 6))
                              for (path, first, name, line), (py, slot, call) in lines])


def _stack(frame) -> dict[int, Any]:
    out = {}
    while frame is not None:
        out[id(frame)] = frame
        frame = frame.f_back
    return out


def _innermost_common(frame, start_frames: dict[int, Any]):
    """The innermost frame on both stacks that is the target's, not diagnose's or runpy's."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the diagnose package
    while frame is not None:
        if start_frames.get(id(frame)) is frame:
            name = frame.f_code.co_filename
            if name.startswith(own) or name.endswith("runpy.py") or name.startswith("<frozen"):
                return None
            return frame
        frame = frame.f_back
    return None


def add_loop_frame(stats: dict, frame, wall_s: float) -> list:
    """Give the stats the frame that ran the window's loop (see PythonRecorder); returns its key.

    cProfile records a call's caller only when it saw the caller entered, so
    the calls the loop frame made are counted in their functions' totals but
    under no caller: for each function, the calls its callers do not account
    for are the loop frame's, with their share of its time (its primitive
    calls' share of its cumulative time: for a recursive function such as
    nn.Module's __call__ the outermost calls, which are the loop's, hold it
    all). The loop frame's own time is the window's time in no function.
    """
    code = frame.f_code
    key = (code.co_filename, code.co_firstlineno, code.co_name)
    own = max(0.0, wall_s - sum(v[2] for v in stats.values()))
    for k, (cc, nc, tt, ct, callers) in list(stats.items()):
        if k == key:
            continue
        missing = nc - sum(c[0] for c in callers.values())  # a caller's entry is (nc, cc, tt, ct)
        if missing <= 0:
            continue
        primitive = min(missing, cc)
        callers[key] = (missing, primitive, tt * missing / nc if nc else 0.0, ct * primitive / cc if cc else 0.0)
    cc, nc, tt, ct, callers = stats.get(key, (0, 0, 0.0, 0.0, {}))
    stats[key] = (cc + 1, nc + 1, tt + own, ct + wall_s, callers)
    return list(key)


# --------------------------------------------------------------- parent side

# torch's built-ins, and the C++ kernels torch.compile generated (inductor loads each as a module named after its
# code's hash: "<built-in method c<hash>.kernel.kernel>", or inductor_entry_cpp with the C++ wrapper): their time
# is the compiled graph's operator work, which cProfile would otherwise count as native code outside torch
_TORCH_BUILTIN = re.compile(r"torch|<built-in method c[a-z0-9]{40,}\.(kernel|inductor_entry_cpp)\b")
# cProfile's names of built-ins that block the calling thread
_WAIT_BUILTIN = re.compile(r"time\.sleep|'acquire' of '_thread|posix\.wait|select\.|'(poll|select|control)' of "
                           r"'select\.|posix\.read\b|'(recv\w*|accept)' of '_socket|'get' of '_queue|"
                           r"'wait' of|_thread\.lock|builtins\.input")


def classify(func: tuple[str, int, str], usercode) -> str:
    filename, _line, name = func
    if filename == "~":
        if _TORCH_BUILTIN.search(name):
            return "torch"
        return "wait" if _WAIT_BUILTIN.search(name) else "builtin"
    return "user" if usercode.is_user(filename) else "library"


def _label(func: tuple[str, int, str], usercode) -> tuple[str, str]:
    filename, line, name = func
    if filename == "~":
        return name, "~"
    return name, f"{usercode.display(filename)}:{line}"


def hotspots(stats: dict, usercode, spans) -> tuple[list[PythonFunction], PythonSummary]:
    """Rows for `python_hotspots` and the time split, from `pstats.Stats(...).stats`."""
    total_s = sum(v[2] for v in stats.values()) or 1e-12
    split: dict[str, float] = defaultdict(float)
    kinds = {}
    for func, (_cc, _nc, tt, _ct, _callers) in stats.items():
        kinds[func] = classify(func, usercode)
        split[kinds[func]] += tt
    # calls each function makes, per callee: callers are stored on the callee
    tiny: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])
    large_torch: dict[tuple, float] = defaultdict(float)
    # a package's function (transformers' forward): its calls into torch that cProfile saw (built-ins, and torch's
    # Python layers such as nn.Module.__call__), whose operators are at its lines but not in its own time
    package = {f: usercode.library(f[0]) for f in stats if kinds[f] == "library"}
    into_torch: dict[tuple, float] = defaultdict(float)
    # C functions each function called directly (cProfile's "~" entries): their time, with cProfile's cost on each
    c_calls: dict[tuple, float] = defaultdict(float)
    for callee, (_cc, _nc, _tt, _ct, callers) in stats.items():
        if callee[0] == "~":
            for caller, (nc, _c, _t, ct) in callers.items():
                c_calls[caller] += ct + nc * CPROFILE_CALL_US / 1e6
        if kinds[callee] == "torch" or (kinds[callee] == "library" and package[callee] is None):
            for caller, (_n, _c, _t, ct) in callers.items():
                if package.get(caller):
                    into_torch[caller] += ct
        if kinds[callee] in ("user", "wait"):  # waiting is not the cost of driving torch from Python
            continue
        for caller, (nc, _cc, _t, ct) in callers.items():  # (nc, cc, tt, ct), as cProfile writes them
            if nc and kinds.get(caller) == "user" and ct * 1e6 / nc < TINY_CALL_US:
                tiny[caller][0] += ct
                tiny[caller][1] += nc
            elif nc and kinds.get(caller) == "user" and kinds[callee] in ("torch", "library"):
                # a large call into torch or a package: the operators it runs are located at the caller's lines
                # (their innermost user frame) but are in this call's time, not in the caller's own
                large_torch[caller] += ct
    rows = []
    for func, (_cc, nc, tt, ct, _callers) in stats.items():
        name, location = _label(func, usercode)
        row = PythonFunction(
            function=name, location=location, kind=kinds[func], calls=nc, self_s=round(tt, 6),
            cumulative_s=round(ct, 6), self_pct=round(100 * tt / total_s, 3),
            cumulative_pct=round(100 * ct / total_s, 3),
        )
        if row.kind in ("builtin", "library"):
            via = _user_caller(func, stats, kinds)
            if via is not None:
                row.called_from = f"{via[2]} at {_label(via, usercode)[1]}"
        if package.get(func):
            row.end_line = spans.end_line(os.path.realpath(func[0]), func[1])
            row.torch_calls_s = round(into_torch[func], 6)
        if row.kind == "user":
            row.end_line = spans.end_line(os.path.realpath(func[0]), func[1])
            row.loop_overhead_s = round(tt + tiny[func][0], 6)
            row.tiny_calls = tiny[func][1]
            row.torch_calls_s = round(large_torch[func], 6)
            row.c_calls_s = round(c_calls[func], 6)
        rows.append(row)
    rows.sort(key=lambda r: -r.self_s)
    keep = rows[:TOP_BY_SELF] + [r for r in rows[TOP_BY_SELF:]
                                 if r.kind == "user" and r.cumulative_pct >= USER_MIN_CUMULATIVE_PCT]
    summary = PythonSummary(
        total_s=round(total_s, 6),
        functions=len(stats),
        calls=sum(v[1] for v in stats.values()),
        split_s=PythonSplit(**{f.name: round(split.get(f.name, 0.0), 6) for f in dataclasses.fields(PythonSplit)}),
        operator_share=round(split.get("torch", 0.0) / total_s, 4),
        python_share=round(1 - (split.get("torch", 0.0) + split.get("wait", 0.0)) / total_s, 4),
    )
    return keep, summary


def _user_caller(func: tuple, stats: dict, kinds: dict, depth: int = 6) -> tuple | None:
    """The user function through which `func` got most of its time: its heaviest caller, and that caller's,
    up to `depth` levels (numpy's Python wrapper between the user's line and numpy's C code)."""
    for _ in range(depth):
        callers = stats.get(func, (0, 0, 0.0, 0.0, {}))[4]
        if not callers:
            return None
        func = max(callers, key=lambda c: callers[c][3])  # (nc, cc, tt, ct): time that came through it
        if kinds.get(func) == "user":
            return func
    return None



def pass_pace(summary: PythonSummary, report: Report, pass_wall_s: float | None) -> float:
    """How much slower the call-graph pass ran its torch work than the operator pass did, beyond what
    cProfile's per-call cost explains (>= 1). Passes run one after the other on a shared machine, and a
    pass slowed by the host (seen: 1.4x on a script of 20 large matmuls with ~100 Python calls) would
    otherwise book its slower operators as Python time."""
    op_wall = report.run.instrumented_wall_s
    if not pass_wall_s or not op_wall:
        return 1.0
    profiled = pass_wall_s - summary.calls * CPROFILE_CALL_US / 1e6
    return max(1.0, profiled / op_wall)


def correct_hidden_operators(rows: list[PythonFunction], summary: PythonSummary, report: Report,
                             pass_wall_s: float | None = None) -> None:
    """Move operator work that cProfile booked as a user function's own time back to operators.

    Tensor operators (`x * y`, `a @ b`, `x[i]`, `out[i] = v`) run through C
    slots, which cProfile does not see as calls: their time lands in the
    calling function's self time and would read as Python overhead. The
    operator pass knows all operator time per line of user code; per function,
    the large operators at its lines (>= TINY_CALL_US per call) minus the
    large calls cProfile did see it make into torch or a package (built-ins,
    nn.Module.__call__: the operators they run are at its lines too, but in
    their time) is that hidden time. Tiny
    hidden operators stay counted as overhead: per call, their cost is the
    dispatch from Python. Operator-pass times are scaled to the call-graph
    pass's iterations (function mode records a window) and to its pace
    (`pass_pace`: a pass the host slowed ran its operators slower too).
    """
    pace = pass_pace(summary, report, pass_wall_s)
    summary.operator_pace = round(pace, 3)
    scale = report.callgraph_scale(pace)
    own = summary.own_time if summary.own_time is not None and summary.own_time.samples >= OWN_MIN_SAMPLES else None
    by_line = _operators_by_line(report) if own is not None else {}
    moved = {"user": 0.0, "library": 0.0}
    native_s = 0.0
    for row in rows:
        if row.kind not in moved:
            continue
        hidden, native = _hidden_and_native(row, own, by_line, scale, numpy=bool(
            own is not None and own.numpy_loaded and report.operators))
        # to the microsecond first: the difference of two equal sums of seconds can come out 1e-17, not 0
        hidden, native = round(hidden, 6), round(native, 6)
        if hidden > 0:
            row.hidden_operator_s = hidden
            moved[row.kind] += hidden
        if native > 0:
            row.numpy_s = native
            native_s += native
        if row.kind == "user" and hidden + native > 0:
            row.loop_overhead_s = round(max(0.0, (row.loop_overhead_s or 0.0) - hidden - native), 6)
    moved["library"] += _move_below_python(rows, report, scale)
    if native_s:
        summary.split_s.user = round(max(0.0, summary.split_s.user - native_s), 6)
        summary.split_s.builtin = round(summary.split_s.builtin + native_s, 6)
        summary.numpy_s = round(native_s, 6)
    if sum(moved.values()) and summary.total_s:
        split = summary.split_s
        split.user = round(max(0.0, split.user - moved["user"]), 6)
        split.library = round(max(0.0, split.library - moved["library"]), 6)
        moved = sum(moved.values())
        split.torch = round(split.torch + moved, 6)
        summary.operator_share = round(split.torch / summary.total_s, 4)
        summary.python_share = round(1 - (split.torch + split.wait) / summary.total_s, 4)
        summary.hidden_operator_s = round(moved, 6)


def _large(calls: int, self_cpu_us: float) -> bool:
    """An operator pass's share of calls that are large: TINY_CALL_US or more a call (the tiny ones are the cost of
    driving torch from Python, and stay its)."""
    return bool(calls) and self_cpu_us / calls >= TINY_CALL_US


def _operators_by_line(report: Report) -> dict[str, tuple[float, float]]:
    """Per user line ("file.py:LINE"), the operator pass's self time (s) of every operator called from it, and of
    the large ones (>= TINY_CALL_US a call)."""
    out: dict[str, tuple[float, float]] = {}
    for op in report.operators:
        for share in op.sources:
            if share.location:
                every, large = out.get(share.location, (0.0, 0.0))
                s = share.self_cpu_us / 1e6
                out[share.location] = (every + s, large + (s if _large(share.calls, share.self_cpu_us) else 0.0))
    return out


def _hidden_and_native(row: PythonFunction, own: OwnTime | None, by_line: dict[str, tuple[float, float]],
                       scale: float, numpy: bool) -> tuple[float, float]:
    """(operator work, numpy's work) in a function's own time (seconds of the call-graph pass).

    Unsampled (a package's function, or too few samples): the large operators at its lines (operator pass, at
    this pass's `scale`) less the large calls cProfile saw it make into torch, a difference of two passes'
    measurements. Sampled (OwnTimeSampler, user functions): what its frame spent in C slot operations, line by
    line: at a line with torch operators, up to their large ones' time is theirs; at a line where the operator
    pass recorded none, with numpy loaded (`numpy`), it is numpy's (`raw @ projection` on arrays), as are the
    calls sampled there that cProfile saw no call for (`rng.standard_normal(...)`, a Cython method: the
    function's sampled calls beyond those cProfile saw, at most those made at such lines), kept on the row as
    numpy_s and numpy_at. The rest of its own time is Python."""
    if own is None or row.kind != "user":
        if not row.operators_all_s:
            return 0.0, 0.0
        return min(row.self_s, max(0.0, row.operators_all_s * scale - (row.torch_calls_s or 0.0))), 0.0
    lines = [line for line in own.lines if line.function == row.function and line.defined_at == row.location]
    row.slot_s = round(sum(line.slot_s for line in lines), 6)
    hidden = min(row.self_s, sum(min(line.slot_s, by_line[line.location][1] * scale)
                                 for line in lines if line.location in by_line))
    if not numpy:
        return hidden, 0.0
    # calls cProfile saw no call for: the time sampled in calls from its frame (a Python callee has its own frame)
    # beyond that of the C functions cProfile saw it call, with the cost cProfile adds to each (c_calls_s)
    unseen = max(0.0, sum(line.call_s for line in lines) - (row.c_calls_s or 0.0))
    outside = [line for line in lines if line.location not in by_line]  # no torch operator there
    calls = sum(line.call_s for line in outside)
    share = min(1.0, unseen / calls) if calls else 0.0
    foreign = {line.location: line.slot_s + line.call_s * share for line in outside}
    native = min(max(0.0, row.self_s - hidden), sum(foreign.values()))
    if native > 0:
        row.numpy_at = _first_of_the_largest(foreign, own.sample_s)
    return hidden, native


def _first_of_the_largest(seconds: dict[str, float], sample_s: float) -> str:
    """The location ("file.py:LINE") holding the most sampled time, or where others hold as much within the
    sampling error of the difference (two standard deviations: sqrt(k1 + k2) samples of k1 and k2), the first of
    them in the file: examples/numpy_beside_torch.py's rng.standard_normal (line 36) and raw @ projection (line 37)
    took 0.19 s and 0.16 s of a pass of some 500 samples, and the larger of the two changed from run to run."""
    top = max(seconds.values())
    near = [loc for loc, s in seconds.items() if top - s <= 2 * ((top + s) * sample_s) ** 0.5]
    return min(near, key=lambda loc: int(loc.rpartition(":")[2] or 0))


def _move_below_python(rows: list[PythonFunction], report: Report, scale: float) -> float:
    """Move the operators a scripted or traced module's forward ran (OperatorSummary.below_python_us) out of the
    nn.Module call frames' own time; returns the seconds moved.

    Such a forward is C++ that `nn.Module._call_impl` calls through the object's call slot, not a C function,
    so cProfile reports no call for it: its whole run is the own time of torch's module.py frame that called it
    (a scripted GRU's 0.95 s read as 100% Python). The operator pass saw those operators below the module's call
    label with no torch call from Python between, at this pass's scale, and at most what the frames hold moves."""
    ops = report.operator_summary
    root = torch_root()
    if not ops or not ops.below_python_us or root is None:
        return 0.0
    module_py = os.path.join(root, "nn", "modules", "module.py")
    left = ops.below_python_us / 1e6 * scale
    moved = 0.0
    frames = [r for r in rows if r.kind == "library" and os.path.realpath(r.location.rpartition(":")[0]) == module_py]
    for row in sorted(frames, key=lambda r: -r.self_s):
        hidden = min(left, row.python_s)
        if hidden <= 0:
            continue
        row.hidden_operator_s = round((row.hidden_operator_s or 0.0) + hidden, 6)
        moved += hidden
        left -= hidden
    return moved


def join_operators(rows: list[PythonFunction], report: Report, spans=None, usercode: UserCode | None = None) -> None:
    """List, per user function, the operators called from its lines (operator pass); a script's `<module>`
    holds the lines outside every function of its file (a loop at module scope). A package's function
    (transformers' forward) gets the time of the large operators whose library line is one of its lines, for
    correct_hidden_operators."""
    spans = spans or FunctionSpans()
    if usercode is not None:
        _join_package_operators(rows, report, usercode)
    by_file: dict[str, list[tuple[int, str, Any]]] = defaultdict(list)
    for op in report.operators:
        for share in op.sources:
            path, _, line = (share.location or "").rpartition(":")
            if path and line.isdigit():
                by_file[os.path.realpath(path)].append((int(line), share.location, (op, share)))
    for row in rows:
        module_scope = row.kind == "user" and row.function == "<module>"
        if row.kind != "user" or (row.end_line is None and not module_scope):
            continue
        path, _, first = row.location.rpartition(":")
        real, first_line = os.path.realpath(path), int(first)
        found = []
        for line, location, (op, share) in by_file.get(real, []):
            inside = spans.enclosing(real, line) is None if module_scope else first_line <= line <= row.end_line
            if inside:
                found.append(LineOperator(op=op.name, input_shapes=op.input_shapes, location=location,
                                          calls=share.calls, self_cpu_us=share.self_cpu_us))
                if _large(share.calls, share.self_cpu_us):
                    row.operators_all_s = (row.operators_all_s or 0.0) + share.self_cpu_us / 1e6
        found.sort(key=lambda o: -o.self_cpu_us)
        row.operators = found[:MAX_OPERATORS_PER_FUNCTION]


def _join_package_operators(rows: list[PythonFunction], report: Report, usercode: UserCode) -> None:
    by_line: dict[str, list[tuple[int, float]]] = defaultdict(list)  # package file -> (line, large operators' s)
    for op in report.operators:
        for share in op.modules:
            path, _, line = (share.library_line or "").rpartition(":")
            if path and line.isdigit() and _large(share.calls, share.self_cpu_us):
                by_line[path].append((int(line), share.self_cpu_us / 1e6))
    for row in rows:
        if row.kind != "library" or row.end_line is None:
            continue
        path, _, first = row.location.rpartition(":")
        package = usercode.library(path)
        if package and package in by_line and first.isdigit():
            found = sum(s for line, s in by_line[package] if int(first) <= line <= row.end_line)
            row.operators_all_s = round(found, 6) if found else None


def _entry_selector(stats: dict, report: Report, script_path: str, root: list | None = None) -> str | None:
    """gprof2dot's name for the workload's entry, to root the graph there: the frame that ran the
    window's loop (script mode), else the script's <module> or the function of function mode."""
    if root:
        filename, line, name = root
        return f"{os.path.splitext(os.path.basename(filename))[0]}:{line}:{name}"
    want = report.target.function or "<module>"
    real = os.path.realpath(script_path)
    for filename, line, name in stats:
        if name == want and filename != "~" and os.path.realpath(filename) == real:
            stem = os.path.splitext(os.path.basename(filename))[0]
            return f"{stem}:{line}:{name}"
    return None


class PythonLayer(Layer):
    name = "python"
    description = "cProfile call graph (gprof2dot + dot) and Python hotspots"
    options = ("callgraph", CallgraphOptions)

    def recorder(self, spec: PassSpec) -> PythonRecorder:
        return PythonRecorder(spec)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        raw = outcome.raw
        if raw and raw.get("skipped"):
            return LayerStatus("skipped", raw["skipped"])
        if not raw or not raw.get("pstats"):
            return LayerStatus("failed", outcome.failure_reason("the call-graph pass"))
        pstats_path = os.path.join(workdir, raw["pstats"])
        stats = pstats.Stats(pstats_path).stats
        script = os.path.abspath(report.target.script)
        usercode = UserCode(script)
        spans = FunctionSpans()
        rows, summary = hotspots(stats, usercode, spans)
        if raw.get("own_time"):
            summary.own_time = report_io.typed(OwnTime, raw["own_time"])
        join_operators(rows, report, spans, usercode)
        wall = outcome.result.wall_s if outcome.result else None
        correct_hidden_operators(rows, summary, report, wall)
        summary.wall_s = wall
        summary.steps = iteration_stats(outcome.result.iteration_s) if outcome.result else None
        summary.minor_faults = outcome.result.minor_faults if outcome.result else None
        if wall and report.run.wall_s:
            summary.overhead_ratio = round(wall / report.run.wall_s, 3)
        report.python_hotspots = rows
        report.artifacts["pstats"] = PSTATS
        status = LayerStatus("ok")
        options = report_io.typed(CallgraphOptions, raw.get("callgraph") or {})  # as the pass got them
        root = _entry_selector(stats, report, script, raw.get("root"))
        summary.callgraph = CallgraphSettings(node_thres_pct=options.node_thres_pct,
                                              edge_thres_pct=options.edge_thres_pct, focus=options.focus, root=root)
        report.python_summary = summary
        try:
            callgraph.pstats_to_dot(pstats_path, os.path.join(workdir, DOT), options,
                                    focus_paths=[os.path.dirname(script)] if options.focus == "user" else None,
                                    root=root)
            report.artifacts["callgraph_dot"] = DOT
            callgraph.dot_to_png(os.path.join(workdir, DOT), os.path.join(workdir, PNG), options.timeout_s)
            report.artifacts["callgraph_png"] = PNG
        except callgraph.ToolError as exc:
            status.missing[PNG] = str(exc)
            status.notes.append(f"{PNG} was not made: {exc}")
        if outcome.status != "ok":
            status.notes.append(f"the target did not finish this pass ({outcome.status}): "
                                "the call graph covers what ran before")
        return status
