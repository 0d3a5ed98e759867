"""Sampled stacks -> report.sampled and a step budget by sampling (pure functions: no py-spy, no /proc).

Input: py-spy's timed stacks (tools/pyspy.Span: a thread's stack, root first, held for `dur_us`). A span
counts as dur_us x rate samples; every share below is of sampled time.

Each span of a thread is one of:
- waiting: no ATen operator on the stack and a blocking native call below the innermost Python frame
  (sleep, a lock, a condition variable, select/poll, a pipe or socket read, waiting for a child). Left out
  of every share (py-spy samples waiting threads too: --idle, see tools/pyspy.py), except the step budget's
  `waiting` slice and the data slice.
- an operator: the innermost `at::_ops::<op>::call|redispatch` frame names it, mapped to the operator table's
  name (`at::_ops::add__Tensor` -> aten::add_, `_ops_names`): its self time as the operator pass counts it
  (an operator that calls another, linear -> addmm, books the time to the inner one). Attributed to the
  user's line (the innermost Python frame of the user's code) and the library line (the innermost Python
  frame outside torch and the standard library: a model library's line, or the user's).
- torch native: no operator frame, but torch's native code below the innermost Python frame (py-spy's
  unwinder sometimes loses the frames between a Python frame and a kernel): kernel time whose operator is
  not known; in the step budget's kernels slice, in no operator's share.
  Such samples are given to the operators seen from the same Python line (`impute`); the rest stay in the
  budget's kernels slice as torch native code.
- outside torch: no operator on the stack; its library is the first native library below the innermost
  Python frame that is neither the interpreter, libc nor torch (numpy's _multiarray_umath and its
  OpenBLAS: "numpy"), else the innermost Python frame's package ("your code" for the user's files,
  "stdlib"); torch's own Python code is not outside torch.

Steps: on each target process's main thread, a step starts where a marker frame appears after spans without
it: the outermost `Optimizer.step` (a `*.step` frame in torch/optim/), else the outermost nn.Module call. The
detector with more starts wins (optimizer on a tie). Steps need at least MIN_STEPS starts; a step shorter than
a few sample intervals can be missed (min_samples_per_step says how many samples the shortest had). Steps are
timed only where the samples resolve them (`unresolved`): the median step spans at least RESOLVE_SAMPLES
sample intervals, and the steps' times agree (IQR within ALIASED_SPREAD of their median; at least MIN_GAPS of
them). Steps shorter than the sample interval still show "starts": each sample lands in the marker frame or
outside it as if by chance, and the starts (a sample inside after one outside) come at random, spaced like the
sum of two geometric runs (median 3-4 samples, IQR about 0.7x the median where the marker fills half the step;
wider at any other fill). Measured at 5 and 10 Hz on examples/mlp.py's 15 ms steps: medians of 3.4-3.5
samples, IQR/median 0.7 (a "step" of 338-692 ms); on a 1.5 s step at 5 Hz: 7.6 samples, IQR/median 0.2 (1.52
s, as the script timed it); and on a 1 s recording of mlp at 50 Hz, 3 gaps of 7-13 samples (a "step" of 193
ms). Unresolved steps give no step time; the budget then covers the sampled time.

The step budget by sampling: the main threads' sampled time split into kernels (in an operator), python,
native (outside torch, by library: budget.outside_torch reads these items), data (inside a DataLoader's
__next__, waiting or not) and waiting, as shares carried onto the median step (or onto the sampled
duration when no step was seen or timed).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from diagnose.report.model import (
    BudgetItem,
    BudgetSlice,
    SampledFunction,
    SampledLibrary,
    SampledLine,
    SampledOperator,
    SampledProcess,
    SampledSteps,
    StepBudget,
)
from diagnose.tools.pyspy import Frame, Span

OP = re.compile(r"^at::_ops::([A-Za-z0-9_]+)::(?:call|redispatch)$")
WAITING = re.compile(r"(^|[^a-z])(time_sleep|pysleep|clock_nanosleep|nanosleep|futex|pthread_cond_\w*wait|"
                     r"sem_\w*wait|do_futex_wait|lock_PyThread_acquire_lock|PyThread_acquire_lock\w*|acquire_timed|"
                     r"select_(select|poll|epoll)\w*|epoll_wait|__poll|poll_poll|_?select$|os_read_impl|os_waitpid|"
                     r"os_wait\w*|wait4|waitpid|sock_recv\w*|sock_accept\w*|recv(from|msg)?$|__libc_recv|"
                     r"accept4?$|sched_yield|_queue_SimpleQueue_get)")
INTERPRETER = re.compile(r"(libpython|/python[0-9.]*$|/ld-linux|/libc\.so|/libpthread|/libm\.so|\[vdso\]|/libdl)")
TORCH_NATIVE = re.compile(r"/torch/lib/|/libtorch|/libc10|/libgomp|/libiomp|/libmkl|/libshm|torch/_C")
MARKER_FORWARD = ("Module._call_impl", "Module._wrapped_call_impl")
JIT_FILES = ("?", "")  # py-spy's file for a frame in anonymous memory
DNNL = re.compile(r"dnnl|ideep|mkldnn")  # oneDNN: its kernels are generated at run time, without unwind tables
MIN_STEPS = 3  # step starts needed for a step time
RESOLVE_SAMPLES = 4  # sample intervals the median step must span to be timed (module docstring)
ALIASED_SPREAD = 0.5  # the steps' IQR / median above which their starts look random (aliasing gives ~0.7)
MIN_GAPS = 4  # step times needed to tell steps from starts at random (3 gaps of 7-13 samples were aliasing)
DIAGNOSE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
TOP = 30
TOP_LINES = 5


@dataclass
class Where:
    """Decides what a file is: the user's code, a library (by name), torch, or the standard library."""

    cwd: str | None = None

    def package(self, path: str) -> str | None:
        """The installed package a file belongs to (site-packages/<pkg>/ or <pkg>.libs), None outside one;
        diagnose's own files ("diagnose": its runner, in a pass's process) wherever it is installed."""
        if path.startswith(DIAGNOSE_ROOT):
            return "diagnose"
        m = re.search(r"(?:site|dist)-packages/([A-Za-z_][\w]*?)(?:\.libs)?/", path)
        return m.group(1) if m else None

    def kind(self, path: str) -> str:
        """user, torch, library or stdlib."""
        pkg = self.package(path)
        if pkg == "torch" or pkg == "functorch":
            return "torch"
        if pkg == "diagnose":
            return "library"
        if pkg:
            return "library"
        if path.startswith("<") or re.search(r"/lib/python3[.\d]*/", path) or "/torchinductor_" in path:
            return "stdlib"
        return "user"

    def show(self, path: str) -> str:
        """The user's files relative to the target's working directory, a package's from its package folder."""
        m = re.search(r"(?:site|dist)-packages/(.+)$", path)
        if m:
            return m.group(1)
        if self.cwd and path.startswith(self.cwd.rstrip("/") + "/"):
            return os.path.relpath(path, self.cwd)
        return path

    def native_library(self, path: str) -> str | None:
        """A shared object's library outside torch and the interpreter ("numpy"), None for those."""
        if not path or INTERPRETER.search(path) or TORCH_NATIVE.search(path):
            return None
        pkg = self.package(path)
        if pkg == "torch":
            return None
        if pkg:
            return pkg
        return os.path.basename(path).split(".so")[0].removeprefix("lib") or None


def op_name(struct: str, names: dict[str, str]) -> str:
    """at::_ops struct name -> aten::<op>: the table's (from torch's schemas) or the struct name itself."""
    return "aten::" + names.get(struct, struct)


def ops_names() -> dict[str, str]:
    """struct name -> operator name for every ATen operator: ATen's codegen names the struct `{name}_{overload}`
    (`add__Tensor` for add_.Tensor) or `{name}` without an overload. Read from the native_functions.yaml torch
    wheels ship in torchgen (no torch import: that takes seconds on a loaded machine), else from torch's schema
    registry; {} without either (struct names are then shown as they are)."""
    out: dict[str, str] = {}
    try:
        spec = importlib.util.find_spec("torchgen")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "packaged", "ATen", "native", "native_functions.yaml")
        try:
            with open(path, encoding="utf-8") as fh:
                for m in re.finditer(r"^- func: (\w+)(?:\.(\w+))?\(", fh.read(), re.MULTILINE):
                    out[f"{m.group(1)}_{m.group(2)}" if m.group(2) else m.group(1)] = m.group(1)
        except OSError:
            pass
    if out:
        return out
    try:
        import torch

        schemas = torch._C._jit_get_all_schemas()  # no public listing of every schema
    except Exception:  # noqa: BLE001 - no torch here
        return {}
    for s in schemas:
        if s.name.startswith("aten::"):
            name = s.name[len("aten::"):]
            out[f"{name}_{s.overload_name}" if s.overload_name else name] = name
    return out


@dataclass
class Sample:
    """One span, classified."""

    span: Span
    op: str | None = None  # aten::... when inside an operator
    waiting: bool = False
    library: str | None = None  # outside torch: the library (None: torch's own code)
    user: Frame | None = None  # innermost user frame
    library_frame: Frame | None = None  # innermost Python frame outside torch and the standard library
    leaf: Frame | None = None  # innermost Python frame
    native: str | None = None  # inside an operator: the deepest symbolised native frame
    data: bool = False  # inside a DataLoader iterator's __next__
    # torch's native code with no operator frame: py-spy's unwinder lost the frames between the Python frame and
    # a kernel (seen: Linear.forward -> mkl_blas_def_sgemm_kernel_0_zen directly)
    torch_native: bool = False
    modules: str | None = None  # the classes whose forward is on the stack, outermost first
    jit: bool = False  # torch_native, its leaf in anonymous memory: a kernel generated at run time (oneDNN)


def classify(span: Span, where: Where, names: dict[str, str]) -> Sample:
    frames = span.frames
    out = Sample(span)
    last_py = -1
    for i, f in enumerate(frames):
        if f.python:
            last_py = i
            kind = where.kind(f.file)
            if kind == "user":
                out.user = f
            if kind in ("user", "library"):
                out.library_frame = f
            if f.name.endswith("__next__") and "torch/utils/data/" in f.file:
                out.data = True
        else:
            m = OP.match(f.name)
            if m:
                out.op = op_name(m.group(1), names)
                out.native = None
            elif out.op and not f.name.startswith("0x"):
                out.native = f.name
    out.leaf = frames[last_py] if last_py >= 0 else None
    chain = [f.name.rsplit(".", 1)[0] for f in frames if f.python and f.name.endswith(".forward") and "." in f.name]
    out.modules = " > ".join(chain) or None
    below = frames[last_py + 1:]
    if out.op is None:
        out.waiting = any(WAITING.search(f.name) for f in below)
        jit = bool(below) and below[-1].file in JIT_FILES and out.leaf is not None and \
            where.kind(out.leaf.file) == "torch"  # code generated at run time (oneDNN's kernels) under torch's Python
        out.torch_native = not out.waiting and (jit or any(TORCH_NATIVE.search(f.file) for f in below))
        out.jit = jit
        lib = next((name for f in below if f.file not in JIT_FILES and (name := where.native_library(f.file))), None)
        if lib is None and out.leaf is not None:
            kind = where.kind(out.leaf.file)
            lib = {"user": "your code", "stdlib": "stdlib"}.get(kind) or (
                where.package(out.leaf.file) if kind == "library" else None)
        out.library = lib
    return out


@dataclass
class Analysis:
    """What the stacks say (the report's Sampled fields, and the main threads' samples for steps)."""

    samples: int = 0
    operator_samples: int = 0
    operators: list[SampledOperator] = field(default_factory=list)
    functions: list[SampledFunction] = field(default_factory=list)
    libraries: list[SampledLibrary] = field(default_factory=list)
    processes: list[SampledProcess] = field(default_factory=list)
    steps: SampledSteps | None = None
    unresolved: str | None = None  # why steps were seen but not timed (unresolved())
    imputed_samples: int = 0  # operator samples given by impute() (the unwinder lost their operator frame)
    main: list[Sample] = field(default_factory=list)  # the target processes' main threads, in time order
    duration_s: float = 0.0


def operator_notes(result: Analysis) -> list[str]:
    """What the report says about the operator samples (attach and --sample alike): none unwound to an operator
    frame, or how many were given to operators by `impute`."""
    if result.samples and not result.operators:
        return [f"no ATen operator frame in the native stacks of {result.samples} busy samples: the process ran no "
                "torch operator while sampled, or py-spy could not unwind into libtorch (MKL's and oneDNN's "
                "kernels have no unwind tables); their time is the budget's torch native code"]
    if result.imputed_samples:
        return [f"{result.imputed_samples} of the operator samples had lost their operator frame (a kernel py-spy "
                "could not unwind: oneDNN's generated code, a BLAS kernel): given to the operators seen from the "
                "same Python line"]
    return []


def _lines(counter: Counter, total: float, where: Where, functions: dict[tuple[str, int], str]) -> list[SampledLine]:
    return [SampledLine(location=f"{where.show(file)}:{line}", samples=round(n), share_pct=round(100 * n / total, 1),
                        function=functions.get((file, line)))
            for (file, line), n in counter.most_common(TOP_LINES) if n >= 0.5]


def analyse(spans: list[Span], rate_hz: float, where: Where, names: dict[str, str],
            mains: set[tuple[int, int]]) -> Analysis:
    """The stacks' operators, Python functions, libraries and steps (module docstring). `mains`: the
    (pid, tid) of each target process's main thread (the launcher's ranks under torchrun)."""
    per_us = rate_hz / 1e6  # samples per microsecond of span
    out = Analysis()
    if not spans:
        return out
    out.duration_s = (max(s.start_us + s.dur_us for s in spans) - min(s.start_us for s in spans)) / 1e6
    op_n: Counter[str] = Counter()
    op_users: dict[str, Counter] = defaultdict(Counter)
    op_libs: dict[str, Counter] = defaultdict(Counter)
    op_native: dict[str, Counter] = defaultdict(Counter)
    op_modules: dict[str, Counter] = defaultdict(Counter)
    op_imputed: Counter[str] = Counter()
    fn_self: Counter = Counter()
    fn_total: Counter = Counter()
    fn_in_op: Counter = Counter()
    fn_lines: dict[tuple[str, str], Counter] = defaultdict(Counter)
    lib_n: Counter[str] = Counter()
    lib_users: dict[str, Counter] = defaultdict(Counter)
    user_fn: dict[tuple[str, int], str] = {}
    proc_n: Counter[int] = Counter()
    proc_threads: dict[int, set[int]] = defaultdict(set)
    busy = 0.0
    classified = [classify(span, where, names) for span in spans]
    given, _ = impute(classified)
    out.imputed_samples = round(sum(v for _, v in given.values()) * per_us)
    for s in classified:
        span = s.span
        n = span.dur_us * per_us
        proc_threads[span.pid].add(span.tid)
        proc_n[span.pid] += n
        if (span.pid, span.tid) in mains:
            out.main.append(s)
        if s.waiting:
            continue
        busy += n
        if s.user is not None:
            user_fn[(s.user.file, s.user.line)] = s.user.name
        for op, us in (given.get(id(s), ((), 0.0))[0] if not s.op else ()):
            op_n[op] += us * per_us  # a share of an unwound kernel sample (impute)
            op_imputed[op] += us * per_us
        if s.op:
            op_n[s.op] += n
            if s.user is not None:
                op_users[s.op][(s.user.file, s.user.line)] += n
            if s.library_frame is not None:
                op_libs[s.op][(s.library_frame.file, s.library_frame.line, s.library_frame.name)] += n
            if s.native:
                op_native[s.op][s.native] += n
            if s.modules:
                op_modules[s.op][s.modules] += n
        elif s.library:
            lib_n[s.library] += n
            if s.user is not None:
                lib_users[s.library][(s.user.file, s.user.line)] += n
        if s.leaf is not None:
            key = (s.leaf.name, s.leaf.file)
            fn_self[key] += n
            fn_lines[key][s.leaf.line] += n
            if s.op:
                fn_in_op[key] += n
            for key2 in {(f.name, f.file) for f in span.frames if f.python}:
                fn_total[key2] += n
    out.samples = round(busy)
    ops_total = sum(op_n.values())
    out.operator_samples = round(ops_total)
    for op, n in op_n.most_common(TOP):
        if n < 0.5:
            break
        lib = op_libs[op].most_common(1)
        users = _lines(op_users[op], n, where, user_fn)
        out.operators.append(SampledOperator(
            name=op, samples=round(n), share_pct=round(100 * n / ops_total, 1), time_pct=round(100 * n / busy, 1),
            source=users[0].location if users else None, sources=users,
            library_line=f"{where.show(lib[0][0][0])}:{lib[0][0][1]}" if lib else None,
            function=lib[0][0][2] if lib else None,
            modules=op_modules[op].most_common(1)[0][0] if op_modules[op] else None,
            imputed_samples=round(op_imputed[op]),
            native=op_native[op].most_common(1)[0][0] if op_native[op] else None))
    for (name, file), n in fn_self.most_common(TOP):
        if n < 0.5:
            break
        line = fn_lines[(name, file)].most_common(1)[0][0]
        out.functions.append(SampledFunction(
            function=name, location=f"{where.show(file)}:{line}", kind=where.kind(file), self_samples=round(n),
            total_samples=round(fn_total[(name, file)]), self_pct=round(100 * n / busy, 1),
            total_pct=round(100 * fn_total[(name, file)] / busy, 1),
            in_operators_pct=round(100 * fn_in_op[(name, file)] / n, 1)))
    for lib, n in lib_n.most_common():
        if n < 0.5:
            continue
        users = _lines(lib_users[lib], n, where, user_fn)
        out.libraries.append(SampledLibrary(library=lib, samples=round(n), share_pct=round(100 * n / busy, 1),
                                            source=users[0].location if users else None, sources=users))
    for pid, n in proc_n.most_common():
        out.processes.append(SampledProcess(pid=pid, role="", samples=round(n), threads=len(proc_threads[pid])))
    out.main.sort(key=lambda s: (s.span.pid, s.span.start_us))
    out.steps = steps(out.main, rate_hz, where)
    out.unresolved = unresolved(out.steps, rate_hz)
    if out.unresolved:
        out.steps = None
    return out


def impute(samples: list[Sample]) -> tuple[dict[int, tuple[list[tuple[str, float]], float]], float]:
    """Kernel samples whose operator frame the unwinder lost (torch_native: Linear.forward ->
    mkl_blas_def_sgemm_kernel_0_zen; Conv2d._conv_forward -> 0x... in oneDNN's generated code, which has no
    unwind tables) given to the operators seen from the same innermost Python line in the samples that were
    unwound, in proportion: among them, those whose unwound samples hold the same leaf symbol, else for a
    generated-code leaf those that ran oneDNN, else all of them. {id(sample): ([(op, microseconds)], its
    microseconds)}, and the microseconds given; a sample with no operator seen from its line keeps none."""
    by_line: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    symbols: dict[str, set[str]] = defaultdict(set)
    dnnl: set[str] = set()
    for s in samples:
        if s.op and s.leaf is not None:
            by_line[(s.leaf.file, s.leaf.line)][s.op] += s.span.dur_us
            for f in s.span.frames:
                if not f.python and not f.name.startswith("0x"):
                    symbols[s.op].add(f.name)
                    if DNNL.search(f.name):
                        dnnl.add(s.op)
    out: dict[int, tuple[list[tuple[str, float]], float]] = {}
    total = 0.0
    for s in samples:
        if s.op or not s.torch_native or s.leaf is None:
            continue
        seen = by_line.get((s.leaf.file, s.leaf.line))
        if not seen:
            continue
        leaf = s.span.frames[-1]
        pick = [op for op in seen if leaf.name in symbols[op]] if not leaf.name.startswith("0x") else []
        if not pick and s.jit:
            pick = [op for op in seen if op in dnnl]
        pick = pick or list(seen)
        weight = sum(seen[op] for op in pick)
        out[id(s)] = ([(op, s.span.dur_us * seen[op] / weight) for op in pick], s.span.dur_us)
        total += s.span.dur_us
    return out, total


def _marker(frames: tuple[Frame, ...]) -> tuple[Frame | None, Frame | None]:
    """(the outermost optimizer step frame, the outermost nn.Module call frame) of a stack."""
    opt = fwd = None
    for f in frames:
        if not f.python:
            continue
        if opt is None and "/torch/optim/" in f.file and f.name.split(".")[-1] == "step":
            opt = f
        if fwd is None and f.name in MARKER_FORWARD and f.file.endswith("torch/nn/modules/module.py"):
            fwd = f
    return opt, fwd


def steps(main: list[Sample], rate_hz: float, where: Where) -> SampledSteps | None:
    """Steps on the first target process's main thread (module docstring)."""
    if not main:
        return None
    pid = main[0].span.pid
    seq = [s for s in main if s.span.pid == pid]
    found = {}
    for detector, idx in (("optimizer", 0), ("forward", 1)):
        starts: list[int] = []
        samples_since: list[float] = []
        inside = False
        detail = None
        n = 0.0
        for s in seq:
            marker = _marker(s.span.frames)[idx]
            if marker is not None and not inside:
                starts.append(s.span.start_us)
                samples_since.append(n)
                n = 0.0
                if detail is None:
                    caller = next((f for f in reversed(s.span.frames[:s.span.frames.index(marker)]) if f.python), None)
                    detail = (f"{marker.name} ({where.show(marker.file)})" if detector == "optimizer" else
                              "the outermost nn.Module call" + (f" at {where.show(caller.file)}:{caller.line}"
                                                                  if caller else ""))
            inside = marker is not None
            n += s.span.dur_us * rate_hz / 1e6
        if len(starts) >= MIN_STEPS:
            found[detector] = (starts, samples_since[1:], detail)
    if not found:
        return None
    detector = max(found, key=lambda d: (len(found[d][0]), d == "optimizer"))
    starts, per_step, detail = found[detector]
    times = [(b - a) / 1e6 for a, b in itertools.pairwise(starts)]
    return SampledSteps(detector=detector, detail=detail or detector, steps=len(starts),
                        median_s=round(statistics.median(times), 6), step_s=[round(t, 6) for t in times[:1000]],
                        min_samples_per_step=round(min(per_step)) if per_step else 0)


def unresolved(st: SampledSteps | None, rate_hz: float) -> str | None:
    """Why the steps seen are not timed (module docstring: too few samples a step, or starts spaced as at
    random), with the rate that would time them; None: timed, or no step seen."""
    if st is None:
        return None
    if len(st.step_s) < MIN_GAPS:
        return (f"steps seen but not timed: {st.steps} starts of {st.detail} give {len(st.step_s)} step times, "
                f"too few to tell steps from starts where samples happened to land (at least {MIN_GAPS}); a longer "
                "--duration sees more")
    n = [t * rate_hz for t in st.step_s]
    q1, median, q3 = statistics.quantiles(n, n=4, method="inclusive")
    interval = 1000 / rate_hz
    if median >= RESOLVE_SAMPLES and (q3 - q1) <= ALIASED_SPREAD * median:
        return None
    why = (f"the median gap between starts spans {median:.1f} sample intervals, under {RESOLVE_SAMPLES}"
           if median < RESOLVE_SAMPLES else
           f"the gaps between starts spread like chance (IQR {(q3 - q1) / median:.0%} of their median)")
    faster = RESOLVE_SAMPLES * rate_hz  # times steps as short as today's sample interval
    return (f"steps seen but not timed: {st.steps} starts of {st.detail}, and {why}, as when steps are shorter "
            f"than a few sample intervals ({interval:.0f} ms at {rate_hz:g} Hz) and the starts fall where samples "
            f"happened to land; a step needs about {RESOLVE_SAMPLES} intervals, so --rate {faster:g} times steps "
            f"from {interval:.0f} ms (at more cost to the target: docs/attach.md)")


def budget(analysis: Analysis, rate_hz: float, where: Where) -> StepBudget | None:
    """The step budget by sampling: the main threads' sampled time by slice, carried onto the median step
    (module docstring); None without main-thread samples."""
    per_us = rate_hz / 1e6
    total = sum(s.span.dur_us * per_us for s in analysis.main)
    if total <= 0:
        return None
    st = analysis.steps
    unit, step_s = ("step", st.median_s) if st else ("run", analysis.duration_s)
    slices: dict[str, Counter] = {name: Counter() for name in ("kernels", "python", "native", "data", "waiting")}
    where_of: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for s in analysis.main:
        n = s.span.dur_us * per_us
        if s.data:
            name, label = "data", "DataLoader __next__"
        elif s.waiting:
            name, label = "waiting", (s.leaf.name if s.leaf else "?")
        elif s.op:
            name, label = "kernels", s.op
        elif s.torch_native:
            name, label = "kernels", "torch native code, operator frame not unwound"
        elif s.library and s.library not in ("your code", "stdlib"):
            name, label = "native", s.library
        else:
            name, label = "python", (s.leaf.name if s.leaf else "?")
        slices[name][label] += n
        if s.user is not None:
            where_of[(name, label)][f"{s.user.name} at {where.show(s.user.file)}:{s.user.line}"] += n
    out = []
    for name in ("kernels", "python", "native", "data", "waiting"):
        c = slices[name]
        n = sum(c.values())
        if n <= 0:
            continue
        items = []
        for label, k in c.most_common(5):
            loc = where_of[(name, label)].most_common(1)
            items.append(BudgetItem(label=label, s=round(step_s * k / total, 6), share=round(k / total, 4),
                                    op=label if name == "kernels" else None,
                                    location=loc[0][0] if loc else None))
        out.append(BudgetSlice(name=name, s=round(step_s * n / total, 6), share=round(n / total, 4),
                               basis=f"{n:.0f} of {total:.0f} samples of the main thread at {rate_hz:g} Hz "
                                     f"(py-spy, from outside)", items=items))
    onto = (f"carried onto the median step between {st.steps} step starts ({st.detail})" if st else
            "over the sampled time (" + ("the steps seen could not be timed at this rate" if analysis.unresolved
                                         else "no step was seen in the stacks") + ")")
    return StepBudget(unit=unit, step_s=step_s, slices=out, unexplained_share=0.0,
                      costs="sampled: shares of the main thread's samples, no per-call costs",
                      notes=[f"a step budget by sampling: each slice is its share of the main thread's samples {onto}"])
