"""Operators layer, child side: torch.profiler over the measured part of the workload, with source lines.

`OperatorsRecorder` runs inside the pass's child (diagnose/runner.py): a
TorchFunctionMode installed before the target runs (so that torch.compile
sees it from the start and nothing recompiles when the window begins) labels
every torch call made from Python, while the window is recorded, with a
`record_function` range whose name (kineto.Label) carries the innermost user
frame and its current line, the library line (the innermost frame outside
torch: `transformers/models/bert/modeling_bert.py:LINE` inside a library
model, the user's line inside the user's own model) and the module whose
forward is running; every operator below that label in the event tree belongs
to them. Backward and optimizer ops land on the `loss.backward()` /
`opt.step()` line (kineto.py gives backward ops their forward op's module).
torch 2.13's own `with_stack` frames carry each function's *definition* line,
and its Python tracer combined with record_function corrupts event names now
and then, hence the mode; its `with_modules` covers TorchScript only, hence
`ModuleTracker`.

At the end `collect()` reduces the raw kineto events (kineto.py) to raw rows
and writes trace.json, and estimates per-call work of the hot rows while
torch is loaded (efficiency/work.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import weakref
from collections import defaultdict
from typing import Any

from diagnose.distributed import collectives
from diagnose.doctor.process import count_subnormals
from diagnose.layers.base import Recorder
from diagnose.layers.efficiency.work import estimate
from diagnose.layers.operators.kineto import SOURCE_PREFIX, THREAD_PREFIX, Label, reduce_kineto
from diagnose.modulehooks import set_up
from diagnose.protocol import PassSpec
from diagnose.report.model import Work
from diagnose.usercode import SLOT_OPCODES, UserCode

# Calls that never run an operator; skipping them keeps the mode cheap.
_NO_OP_CALLS = frozenset(
    {"__get__", "__set__", "size", "dim", "stride", "numel", "__len__", "is_contiguous",
     "data_ptr", "element_size", "__hash__", "__repr__", "__format__", "storage_offset",
     # a record_function span's ends (torch.profiler's step marks among them): markers, not the step's work; as
     # call sites, one or two a step as the mark fell, they made each step's work look different
     "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
     "_record_function_exit._RecordFunction"}
)


# The operator pass's event budget: recording stops after config.MAX_RECORDED_CALLS torch calls from Python, or
# once the process grew by MAX_RECORDING_GROWTH_BYTES while recording (checked every 1024 calls), so that a script
# without steps, recorded whole, stays bounded. The growth is mostly glibc heap fragmentation: the profiler's
# small per-event allocations pin freed activation memory (measured on examples/mlp.py: ~3-5 MB per training
# step; malloc_trim gives it all back), so the limit is on memory, the count a backstop.
MAX_RECORDING_GROWTH_BYTES = 1 << 30
# So the heap is trimmed (glibc's malloc_trim: freed pages back to the kernel) each time the process grew by
# TRIM_AFTER_GROWTH_BYTES while recording, checked every TRIM_CHECK_EVERY calls. Measured on examples/mlp.py,
# 25 recorded training steps: 386 MB anonymous memory untrimmed, 240 MB trimmed every 8 steps, with the same
# median step time (the pages a fragmented heap grows by are fresh and fault in either way); trimming after
# every step instead cost +20% step time (faults 1.5k -> 2.7k a step). The growth budget then counts what
# recording really keeps.
TRIM_AFTER_GROWTH_BYTES = 32 << 20
SCAN_MAX_SITES = 512  # call sites whose inputs the subnormal scan looks at (a BERT step has about 200)
TRIM_CHECK_EVERY = 128
_BUDGET_CHECK_EVERY = 1024


def _all_threads():
    """The profiler's option to record every thread (torch >= 2.6); None where this torch lacks it."""
    import torch

    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        return None


def _source_mode(recorder: "OperatorsRecorder"):
    import torch
    from torch.overrides import TorchFunctionMode

    record_function = torch.profiler.record_function
    is_compiling = torch.compiler.is_compiling
    locations = recorder.usercode.locations
    tracker = recorder.modules
    grad_enabled = torch.is_grad_enabled
    tensor_types = (torch.Tensor, torch.nn.Parameter)
    every_thread = recorder.spec.all_threads
    get_ident, threads_seen = threading.get_ident, recorder.threads_seen

    float64 = torch.float64
    list_types = (list, tuple)
    sites = recorder.sites
    track_sites = recorder.options.track_sites
    perf_counter = time.perf_counter

    class SourceMode(TorchFunctionMode):
        """Labels each torch call with the user line that made it, while the recorder records.

        Installed for the whole run (prepare/release), so that torch.compile traces the same mode stack
        from the first call on; inside a compiled region it does nothing. Outside compiled regions it also
        notes, the whole run long, the calls that make float64 tensors from something that was not
        (Float64Origins), and while recording each call site's time and input bytes per step and the tensors
        of its list arguments (torch.cat's: CallSite).
        """

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if is_compiling() or not recorder.active or getattr(func, "__name__", "") in _NO_OP_CALLS:
                # is_compiling() first: under dynamo it is a constant, so nothing after it becomes a guard
                if is_compiling():
                    return func(*args, **kwargs)
                if recorder.scanning and getattr(func, "__name__", "") not in _NO_OP_CALLS:
                    recorder.scan_inputs(func, args, sys._getframe(1))
                out = func(*args, **kwargs)
                if type(out) in tensor_types and out.dtype is float64:
                    recorder.float64.note(func, args, kwargs, out, sys._getframe(1))
                return out
            recorder.calls += 1
            if every_thread and get_ident() not in threads_seen:
                recorder.mark_thread()
            if recorder.calls % TRIM_CHECK_EVERY == 0:
                recorder.trim_heap()
                if recorder.calls % _BUDGET_CHECK_EVERY == 0 and recorder.over_budget():
                    recorder.stop()
                    return func(*args, **kwargs)
            caller = sys._getframe(1)
            if caller.f_code.co_code[caller.f_lasti] in SLOT_OPCODES:  # f_lasti: the executing instruction
                recorder.slot_calls += 1
            user, library = locations(caller)
            if not grad_enabled():
                recorder.grad_off_calls += 1
            elif any(type(a) in tensor_types and a.requires_grad for a in args):  # autograd records a node
                recorder.recording[user] = recorder.recording.get(user, 0) + 1
            module = tracker.current()
            if not track_sites:
                with record_function(Label.text(user, library, module)):
                    return func(*args, **kwargs)
            key = (user, library, module, getattr(func, "__name__", ""))
            site = sites.get(key) or recorder.new_site(key)
            listed = None
            nbytes = 0
            try:  # never the script's failure: a tensor without storage (sparse, meta) has no bytes to count
                for a in args:
                    kind = type(a)
                    if kind in tensor_types:
                        nbytes += a.nbytes
                    elif kind in list_types and a and type(a[0]) in tensor_types:  # a TensorList (torch.cat's)
                        listed = site.see_lists(args)
                        nbytes += sum(t.nbytes for t in a if type(t) in tensor_types)
            except Exception:  # noqa: BLE001
                nbytes = 0
            t0 = perf_counter()
            with record_function(Label.text(user, library, module, listed)):
                out = func(*args, **kwargs)
            site.add(recorder.marks, perf_counter() - t0, nbytes)
            if type(out) in tensor_types and out.dtype is float64:
                recorder.float64.note(func, args, kwargs, out, sys._getframe(1))
            return out

    return SourceMode()


SITES_MAX = 300  # call sites whose per-step time and bytes the pass hands back (a BERT step has about 200)
LIST_SHAPES_MAX = 8  # the tensors of a list argument whose shapes are kept (a cat of a thousand pieces: its first)


class CallSite:
    """One call site while recording (user line, library line, module, torch function): its time and input bytes
    per step of the window, for the trends (layers/operators/trends.py), and the tensors of its list arguments
    (torch.cat's) at its first and last call, for the operator rows (the label carries `index` to them)."""

    __slots__ = ("first", "index", "key", "last", "list_calls", "steps")

    def __init__(self, index: int, key: tuple) -> None:
        self.index, self.key = index, key
        self.first: list | None = None
        self.last: list | None = None
        self.list_calls = 0
        self.steps: dict[int, list] = {}  # step of the window (0-based) -> [seconds, input bytes, calls]

    def add(self, step: int, seconds: float, nbytes: int) -> None:
        acc = self.steps.get(step)
        if acc is None:
            self.steps[step] = [seconds, nbytes, 1]
        else:
            acc[0] += seconds
            acc[1] += nbytes
            acc[2] += 1

    def see_lists(self, args: tuple) -> int:
        lists = [(len(a), [list(t.shape) for t in a[:LIST_SHAPES_MAX]]) for a in args
                 if type(a) in (list, tuple) and a and all(hasattr(t, "shape") for t in a[:LIST_SHAPES_MAX])]
        if self.first is None:
            self.first = lists
        self.last = lists
        self.list_calls += 1
        return self.index

    def inputs(self, dtypes: list[str]) -> list[dict[str, Any]]:
        """As the report's ListInput rows, the k-th list argument at the operator's k-th TensorList input."""
        positions = [i for i, d in enumerate(dtypes or []) if d == "TensorList"]
        return [{"index": i, "tensors": first[0], "shapes": first[1], "last_tensors": last[0],
                 "last_shapes": last[1], "calls": self.list_calls}
                for i, first, last in zip(positions, self.first or [], self.last or [])]

    def result(self, steps: int) -> dict[str, Any]:
        """As JSON for the parent: per step of the window, [seconds, input bytes, calls]."""
        user, library, module, function = self.key
        return {"source": user, "library": library, "module": module, "function": function,
                "steps": [self.steps.get(i, [0.0, 0, 0]) for i in range(steps)]}


class Float64Origins:
    """Where float64 tensors come from: calls that made a float64 tensor when none of their tensor inputs was
    float64 (`.double()`, `.to(torch.float64)`, `torch.tensor` of a float64 numpy array, `dtype=torch.float64`,
    a factory under the default dtype float64), and the torch functions the source mode does not see
    (`torch.from_numpy`, `torch.set_default_dtype`: wrapped by `install` for the run). Counted the whole run
    long (the model is usually cast before the window), per (user line, what made it)."""

    def __init__(self, usercode: UserCode) -> None:
        self.usercode = usercode
        self.origins: dict[tuple[str | None, str], list[int]] = {}  # -> [calls, bytes, parameters]
        self.restore: list[tuple[Any, str, Any]] = []

    def note(self, func, args, kwargs, out, frame) -> None:
        import torch

        float64 = torch.float64
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor) and a.dtype is float64:
                return  # float64 in, float64 out: not where it came from
            if type(a) in (list, tuple) and any(isinstance(t, torch.Tensor) and t.dtype is float64 for t in a):
                return
        name = getattr(func, "__name__", str(func))
        how = self._how(torch, name, args, kwargs, frame)
        if how is not None:
            self.add(how, frame, out.nbytes, bool(args) and isinstance(args[0], torch.nn.Parameter))

    def add(self, how: str, frame, nbytes: int, parameter: bool = False) -> None:
        user, _ = self.usercode.locations(frame)
        entry = self.origins.get((user, how))
        if entry is None:
            entry = self.origins[(user, how)] = [0, 0, 0]
        entry[0] += 1
        entry[1] += int(nbytes)
        entry[2] += parameter

    def _how(self, torch, name: str, args, kwargs, frame) -> str | None:
        """What made float64 here, or None when it is not the user's doing: torch's own code passes a dtype
        it was given (an optimizer's or autograd's `torch.empty(..., dtype=param.dtype)`), so an explicit
        dtype or the default dtype counts only in a call the user's own line makes."""
        if name == "double":
            return ".double()"
        if name in ("to", "type"):
            return f".{name}(torch.float64)"
        if name in ("tensor", "as_tensor", "asarray") and args and type(args[0]).__module__ == "numpy":
            return f"torch.{name} of a float64 numpy array"
        if not self.usercode.is_user(frame.f_code.co_filename):
            return None
        if kwargs.get("dtype") is torch.float64:
            return f"torch.{name}(..., dtype=torch.float64)"
        if torch.get_default_dtype() is torch.float64:
            return f"torch.{name} under the default dtype float64 (torch.set_default_dtype)"
        return f"torch.{name}"

    def install(self) -> None:
        """Wrap torch.from_numpy and torch.set_default_dtype, which no TorchFunctionMode sees."""
        import torch

        origins = self

        def from_numpy(array):
            out = original_from_numpy(array)
            if out.dtype is torch.float64:
                origins.add("torch.from_numpy of a float64 array", sys._getframe(1), out.nbytes)
            return out

        def set_default_dtype(d):
            if d is torch.float64:
                origins.add("torch.set_default_dtype(torch.float64)", sys._getframe(1), 0)
            return original_set_default_dtype(d)

        original_from_numpy, original_set_default_dtype = torch.from_numpy, torch.set_default_dtype
        for name, wrapper, original in (("from_numpy", from_numpy, original_from_numpy),
                                        ("set_default_dtype", set_default_dtype, original_set_default_dtype)):
            wrapper.__doc__, wrapper.__wrapped__ = original.__doc__, original
            setattr(torch, name, wrapper)
            self.restore.append((torch, name, original))

    def uninstall(self) -> None:
        for owner, name, original in self.restore:
            setattr(owner, name, original)
        self.restore = []

    def rows(self) -> list[dict[str, Any]]:
        """As the report's Float64Origin rows, most bytes first."""
        return sorted(({"source": user, "how": how, "calls": c, "bytes": b, "parameters": params}
                       for (user, how), (c, b, params) in self.origins.items()), key=lambda r: -r["bytes"])


class AutocastEntries:
    """Where the target entered torch.autocast: its user line, device and dtype, counted the whole run. Under
    autocast a GEMM casts its float32 weights every call (findings/copies.py, kind autocast), and the change
    that ends those casts (the model converted once) goes where autocast is entered, not at the line that
    calls the model. `torch.autocast.__enter__` is wrapped for the run: no TorchFunctionMode sees it."""

    def __init__(self, usercode: UserCode) -> None:
        self.usercode = usercode
        # (user line, device, dtype) -> [entries, of them under torch.inference_mode]
        self.entries: dict[tuple[str | None, str, str], list[int]] = {}
        self.restore: tuple[Any, Any] | None = None

    def install(self) -> None:
        try:
            import torch
            from torch.amp.autocast_mode import autocast
        except ImportError:
            return
        original, entries = autocast.__enter__, self

        def __enter__(context):
            try:
                if context._enabled:  # noqa: SLF001 - autocast(enabled=False) casts nothing
                    entries.add(str(context.device), str(context.fast_dtype).removeprefix("torch."),
                                sys._getframe(1), torch.is_inference_mode_enabled())
            except Exception:  # noqa: BLE001, S110 - never in the way of the target's own autocast
                pass
            return original(context)

        __enter__.__wrapped__ = original
        autocast.__enter__ = __enter__
        self.restore = (autocast, original)

    def add(self, device: str, dtype: str, frame, inference: bool = False) -> None:
        user, _ = self.usercode.locations(frame)
        counts = self.entries.setdefault((user, device, dtype), [0, 0])
        counts[0] += 1
        counts[1] += inference

    def uninstall(self) -> None:
        if self.restore is not None:
            owner, original = self.restore
            owner.__enter__ = original
            self.restore = None

    def rows(self) -> list[dict[str, Any]]:
        """As the report's AutocastEntry rows, most entries first."""
        return sorted(({"source": user, "device": device, "dtype": dtype, "entries": n, "inference_mode": inf}
                       for (user, device, dtype), (n, inf) in self.entries.items()), key=lambda r: -r["entries"])


def _malloc_trim():
    """glibc's malloc_trim(0), or None where there is no glibc."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _class_name(module) -> str:
    inner = getattr(module, "_orig_mod", None)  # torch.compile's OptimizedModule around the user's module
    if type(module).__name__ == "OptimizedModule" and inner is not None:
        return f"{type(inner).__name__} (compiled)"
    return type(module).__name__


class ModuleTracker:
    """Which nn.Module's forward runs, as a path from the outermost module: `encoder.layer.3.attention.self`.

    Global forward pre- and post-hooks, installed for the whole run (so that
    torch.compile traces them, as no-ops, from its first call), keep a stack
    of module paths. The first module called outside any other's forward is
    the main root, whose own path is ""; its submodules are named as
    `named_modules()` names them (`_orig_mod.` of a torch.compile'd module
    left out). Another module called outside any forward is a root of its own,
    named after its class (`CrossEntropyLoss`), and a module its root does not
    hold is named `<Class>` under the module that called it. A module torch's
    set-up code calls (modulehooks.set_up) is never the main root. Inside a compiled
    or scripted region no hook runs: its operators belong to the module that
    called the region. `calls` counts each path's forwards while counting.
    Paths are kept by id(module), and an entry goes when its module does
    (`_remember`): quantize_dynamic's MinMaxObserver modules, roots of their
    own in set-up, once left their ids behind, and a quantised Linear made
    after them at a freed address was named "MinMaxObserver" (a fresh clone's
    examples/quantized_linear.py, 2026-11-28).

    While recording, a call of a root module from Python is itself labelled
    (kineto.Label) with the calling lines: what runs inside without passing
    through the source mode (a torch.compile'd module's generated kernels, a
    scripted module) still gets the user's line and the module.
    """

    def __init__(self, label=None) -> None:
        # (module path, whether the module is scripted or traced) -> a record_function to open around a root's
        # call, or None
        self.label = label
        self.stack: list[str] = []
        self.names: dict[int, str] = {}  # id(module) -> path
        self.roots: dict[int, str] = {}  # id(root module) -> its path
        self.calls: dict[str, list] = {}  # path -> [class name, forward calls while counting]
        self.counting = False
        self.handles: list[Any] = []

    def install(self) -> None:
        import torch
        from torch.nn.modules import module as module_mod

        is_compiling = torch.compiler.is_compiling
        script_module = torch.jit.ScriptModule  # scripted and traced modules (RecursiveScriptModule, TracedModule)
        stack, names, calls = self.stack, self.names, self.calls

        opened: list[Any] = []  # root calls' open labels

        def pre(module, args):
            if is_compiling():
                return
            path = names.get(id(module))
            root = not stack
            if path is None or (root and id(module) not in self.roots):
                path = self._learn(module)
            if root and self.counting and self.label is not None:
                rf = self.label(path, isinstance(module, script_module))
                rf.__enter__()
                opened.append((len(stack), rf))
            stack.append(path)
            if self.counting:
                entry = calls.get(path)
                if entry is None:
                    calls[path] = [_class_name(module), 1]
                else:
                    entry[1] += 1

        def post(module, args, output):
            if not is_compiling() and stack:
                stack.pop()
                if opened and opened[-1][0] == len(stack):
                    opened.pop()[1].__exit__(None, None, None)

        self.handles = [module_mod.register_module_forward_pre_hook(pre),
                        module_mod.register_module_forward_hook(post, always_call=True)]

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def _learn(self, module) -> str:
        if self.stack:  # a module its root does not hold, called inside a forward
            path = f"{self.stack[-1]}.<{type(module).__name__}>" if self.stack[-1] else f"<{type(module).__name__}>"
            self._remember(module, path)
            return path
        if id(module) in self.names:  # a submodule of a known root, called on its own
            return self.names[id(module)]
        # the main root is the first module the script calls, not one torch's set-up code calls
        # (quantize_dynamic's observers, jit.trace): those are roots of their own, named after their class
        main = "" not in self.roots.values() and not set_up(module, sys._getframe())
        prefix = "" if main else _class_name(module).split(" ")[0]
        while prefix and prefix in self.roots.values():
            prefix += "'"
        self.roots[id(module)] = prefix
        for name, sub in module.named_modules(remove_duplicate=False):
            parts = [p for p in name.split(".") if p and p != "_orig_mod"]
            path = ".".join([prefix] + parts if prefix else parts)
            if id(sub) not in self.names:  # a submodule keeps its first path
                self._remember(sub, path)
        self._remember(module, prefix)
        return prefix

    def _remember(self, module, path: str) -> None:
        """names[id(module)] = path until the module is freed (class docstring: its id may then be another's)."""
        key = id(module)
        if key not in self.names:
            try:
                weakref.finalize(module, self._forget, key)
            except TypeError:  # no weak references to it: kept, as before
                pass
        self.names[key] = path

    def _forget(self, key: int) -> None:
        self.names.pop(key, None)
        self.roots.pop(key, None)

    def result(self) -> dict[str, Any]:
        return {path: {"class": cls, "calls": n} for path, (cls, n) in self.calls.items()}


class OperatorsRecorder(Recorder):
    def __init__(self, spec: PassSpec):
        self.spec = spec
        self.options = spec.operators
        self.usercode = UserCode(spec.script, cwd=spec.cwd)
        self.max_trace_events = self.options.trace_max_events
        self.window = self.options.profile_iters
        self.max_calls = self.options.max_recorded_calls
        self.prof = None
        self.mode = None
        self.active = False
        self.calls = self.slot_calls = 0
        self.malloc_trim = _malloc_trim()
        self.rss_trimmed = 0
        self.budget_note = None
        self.rss0 = 0
        self.modules = ModuleTracker(self._root_label)
        # The recorded profile and its raw kineto results, kept from the
        # profiler's stop until collect() reduces them.
        self.profile = None
        self.results = None
        self.steps = 0
        self.marks = 0  # step boundaries marked in the profile (step_boundary)
        self.schedule_note = None
        self.recording: dict[str | None, int] = {}  # user line -> calls that built an autograd graph node
        self.grad_off_calls = 0
        # the doctor's scan of operator inputs for subnormal values, during the last step before the window
        self.scanning = False
        self.input_scan: dict[tuple, list[dict[str, Any]]] = {}  # (call, module, user line, library) -> inputs
        self.scan_scope: str | None = None  # what was scanned; None when no step came before the window
        self.float64 = Float64Origins(self.usercode)
        self.autocast = AutocastEntries(self.usercode)
        self.sites: dict[tuple, CallSite] = {}  # (user line, library line, module, function) -> its site
        self.site_rows: list[CallSite] = []
        self.threads_seen: set[int] = set()  # Python threads whose name is marked in the profile (mark_thread)
        self.in_child = False  # recording a process the target forked (restart_in_child)

    def prepare(self) -> None:
        try:  # torch.compile's C++ kernels get a profiler range each, named after what they fuse
            import torch._inductor.config as inductor_config

            inductor_config.cpp.enable_kernel_profile = True
        except (ImportError, AttributeError):
            pass
        if self.options.track_modules:
            self.modules.install()
        self.float64.install()
        self.autocast.install()
        self.mode = _source_mode(self)
        self.mode.__enter__()

    def release(self) -> None:
        mode, self.mode = self.mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
        self.modules.uninstall()
        self.float64.uninstall()
        self.autocast.uninstall()

    def new_site(self, key: tuple) -> CallSite:
        site = self.sites[key] = CallSite(len(self.site_rows), key)
        self.site_rows.append(site)
        return site

    def last_warmup_step(self) -> None:
        self.scanning = True
        self.scan_scope = ("the tensor inputs of every torch call site in the last step before the window "
                           "(operator pass)")

    def scan_inputs(self, func, args: tuple, frame) -> None:
        """Count subnormal values in a torch call's tensor inputs, once per call site (see `scanning`)."""
        import torch

        user, library = self.usercode.locations(frame)
        key = (getattr(func, "__name__", str(func)), self.modules.current(), user, library)
        if key in self.input_scan:
            return
        if len(self.input_scan) >= SCAN_MAX_SITES:
            self.scan_scope = (f"the tensor inputs of the first {SCAN_MAX_SITES} torch call sites in the last step "
                               "before the window (operator pass)")
            return
        flat = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,))]
        rows = []
        with torch.no_grad():
            for i, t in enumerate(flat):
                counted = count_subnormals(t)
                if counted:
                    rows.append({"input": i, **counted})
        self.input_scan[key] = rows

    def scan_rows(self) -> list[dict[str, Any]]:
        """The scan as the doctor's SubnormalScan rows: one per scanned input."""
        out = []
        for (call, module, user, library), inputs in self.input_scan.items():
            where = " at ".join(x for x in dict.fromkeys((library, user)) if x) or "?"
            inside = f" in module {module}" if module else ""
            out += [{"tensor": f"{call} input {row['input']}{inside} at {where}",
                     **{k: v for k, v in row.items() if k != "input"}} for row in inputs]
        return out

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        self.scanning = False
        self.profile = self.results = self.budget_note = None
        self.calls = self.slot_calls = self.grad_off_calls = self.marks = 0
        self.recording.clear()
        self.sites.clear()
        self.site_rows.clear()
        self.rss0 = self.rss_trimmed = _rss_bytes()
        sched = None
        iters = self.spec.window.steps if self.spec.mode == "function" and self.spec.window and not self.in_child \
            else None
        if iters and iters > self.window:
            # Long loops: record only the last `window` iterations so the
            # trace and the profiler's memory stay bounded.
            skip = iters - self.window - 1
            sched = schedule(skip_first=skip, wait=0, warmup=1, active=self.window, repeat=1)
            self.schedule_note = (
                f"recorded the last {self.window} of {iters} measured iterations "
                f"(torch.profiler schedule: skip_first={skip}, warmup=1, active={self.window})"
            )
        self.prof = profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            with_flops=True,
            profile_memory=True,
            schedule=sched,
            on_trace_ready=self._ready if sched else None,
            # every thread's operators, not only those of the thread that started recording (a model served
            # from a ThreadPoolExecutor runs in none of them)
            experimental_config=_all_threads() if self.spec.all_threads else None,
        )
        self.prof.__enter__()
        self.threads_seen.clear()
        self.mark_thread()
        self.modules.calls.clear()
        self.modules.counting = True
        self.active = True

    def mark_thread(self) -> None:
        """Name the calling thread in the profile (kineto.THREAD_PREFIX): the thread that starts recording, and
        with every thread recorded, each other thread at its first torch call or call of a root module."""
        import torch

        self.threads_seen.add(threading.get_ident())
        with torch.profiler.record_function(THREAD_PREFIX + threading.current_thread().name):
            pass

    def restart_in_child(self) -> None:
        """In a process the target forked (children.ChildPass): record it from here to its end, whole.

        The profile this process inherited is the parent's: stopping it here would reduce all the parent's
        events in this process (seconds), so it is left as it is, and a fresh one records this process. The
        source mode and the module hooks are inherited in place and keep labelling its calls."""
        self.prof = None
        self.in_child = True
        self.scanning = False
        self.input_scan.clear()
        self.scan_scope = None
        self.start()

    def _memory_profile(self) -> dict[str, Any]:
        """The memory layer's reading of this profile's allocations (layers/memory/retained.py), or
        {"skipped": why}."""
        if self.spec.all_threads:
            return {"skipped": "the operator pass recorded every thread (profile_all_threads), which records no "
                               "allocations: torch's live bytes and what keeps memory alive are not known"}
        if self.results is None:
            return {"skipped": "the operator pass recorded nothing"}
        if self.schedule_note:
            return {"skipped": "the operator pass recorded only the last iterations (a profiler schedule): "
                               "torch's live bytes per iteration are not read"}
        from diagnose.layers.memory import retained  # the memory layer's child side, used only here

        try:
            return retained.analyse(self.results, self.marks, (SOURCE_PREFIX, Label.parse), self.usercode,
                                    sys._getframe(1))
        except Exception as exc:  # noqa: BLE001 - the operator rows stand without it
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _root_label(self, path: str, scripted: bool = False):
        """The label of a root module's call from Python (ModuleTracker); a scripted or traced module's is marked
        (kineto.Label.ROOT): its forward is C++, whose operators no Python frame calls."""
        import torch

        if self.spec.all_threads and threading.get_ident() not in self.threads_seen:
            self.mark_thread()  # the module hooks are global: a thread the source mode (thread-local) does not see
        user, library = self.usercode.locations(sys._getframe(1))  # torch's and diagnose's frames are skipped
        return torch.profiler.record_function(Label.text(user, library, path, Label.ROOT if scripted else None))

    def trim_heap(self) -> None:
        """Give the heap's freed pages back once the process grew by TRIM_AFTER_GROWTH_BYTES (see there)."""
        if self.malloc_trim is None or _rss_bytes() - self.rss_trimmed < TRIM_AFTER_GROWTH_BYTES:
            return
        self.malloc_trim(0)
        self.rss_trimmed = _rss_bytes()

    def over_budget(self) -> bool:
        grown = _rss_bytes() - self.rss0
        if self.calls < self.max_calls and grown < MAX_RECORDING_GROWTH_BYTES:
            return False
        why = (f"{self.calls} torch calls" if self.calls >= self.max_calls
               else f"the process grew by {grown / (1 << 30):.1f} GiB while recording")
        self.budget_note = (f"recording stopped after {self.calls} torch calls ({why}: the operator pass's event "
                            "budget); the rows cover the run up to there")
        return True

    def _ready(self, prof) -> None:
        # Only keep the raw results here: with a schedule this runs inside the
        # measured loop, and prof.events() would build ~100 µs of Python
        # objects per event. collect() reduces the raw events directly.
        self.profile = prof
        self.results = prof.profiler.kineto_results

    def step(self) -> None:
        self.steps += 1
        if self.prof is not None and self.schedule_note:
            self.prof.step()
        elif self.active:
            self.step_boundary()

    def step_boundary(self) -> None:
        """A step of the window ended (steps.StepClock.on_step): marked in the profile, so that the memory
        layer reads torch's live bytes at each boundary (layers/memory/retained.py)."""
        if self.active and self.prof is not None and not self.spec.all_threads:
            import torch  # child side, as every recorder method

            if torch.compiler.is_compiling():  # a hook traced inside a compiled region: no range there
                return

            from diagnose.layers.memory.retained import mark  # the memory layer's child side, used only here

            self.marks += 1
            mark(torch)

    def stop(self) -> None:
        self.active = False
        self.modules.counting = False
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
            if self.results is None and (not self.schedule_note or self.budget_note):
                self._ready(prof)

    def collect(self, workdir: str) -> dict[str, Any]:
        reduced = reduce_kineto(self.results, os.path.join(workdir, "trace.json"), self.max_trace_events)
        if self.spec.distributed is not None:  # a torchrun rank: its collectives (gloo:all_reduce, ...) too

            reduced["collectives"] = collectives.summarise(self.results)
        for row in reduced.get("rows") or []:
            site = row.pop("list_site", None)
            if site is not None and site < len(self.site_rows):
                row["list_inputs"] = self.site_rows[site].inputs(row["dtypes"])
        attach_work(reduced.get("rows") or [])
        # a forked child's memory is its own, not the step's the memory layer reads
        memory = {"memory_profile": self._memory_profile()} if self.spec.memory and not self.in_child else {}
        return {
            **memory,
            **reduced,
            "window": self.schedule_note,
            "all_threads": self.spec.all_threads,
            "recorded_iters": self.window if self.schedule_note else None,
            "recorded_calls": self.calls,
            "autograd": {"recording": [[line, n] for line, n in self.recording.items()],
                         "grad_mode_off_calls": self.grad_off_calls, "slot_calls": self.slot_calls},
            "budget": self.budget_note,
            "modules": self.modules.result(),
            "input_scan": self.scan_rows(),
            "input_scan_scope": self.scan_scope,
            "module_roots": sorted(set(self.modules.roots.values())),
            "float64_origins": self.float64.rows(),
            "autocast_entries": self.autocast.rows(),
            "sites": self._site_results(),
        }

    def _site_results(self) -> list[dict[str, Any]]:
        """Each call site's time and input bytes per step of the window (CallSite.result), the SITES_MAX with most
        time; none without at least two steps."""
        if self.marks < 2 or self.schedule_note:
            return []
        busy = sorted(self.site_rows, key=lambda site: -sum(acc[0] for acc in site.steps.values()))
        return [site.result(self.marks) for site in busy[:SITES_MAX]]


WORK_MIN_SHARE = 0.01  # rows with >= 1% of self time get a work estimate (the efficiency layer's hot rows)
WORK_MAX_ROWS = 24


def attach_work(rows: list[dict[str, Any]]) -> None:
    """Per-call FLOPs and bytes of the hot (operator, shapes), estimated here where torch is loaded.

    The efficiency layer would otherwise start a process (and import torch)
    to do it; estimating on meta tensors takes milliseconds per row.
    """
    total = sum(r["self_cpu_us"] for r in rows) or 1.0
    by_key: dict[str, float] = defaultdict(float)
    for r in rows:
        by_key[r["name"] + json.dumps(r["input_shapes"])] += r["self_cpu_us"]
    hot = sorted((k for k, v in by_key.items() if v >= WORK_MIN_SHARE * total), key=lambda k: -by_key[k])
    hot = set(hot[:WORK_MAX_ROWS])
    done: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["name"] + json.dumps(r["input_shapes"])
        if key in hot and r.get("input_strides") is not None:
            if key not in done:
                try:
                    work = estimate(r)
                except Exception as exc:  # noqa: BLE001 - the efficiency layer reports rows without work
                    work = Work(reason=f"{type(exc).__name__}: {exc}")
                done[key] = dataclasses.asdict(work)  # the pass's result is JSON
            r["work"] = done[key]


# Names torch drops before it builds FunctionEvents (torch.autograd.profiler_util._filter_name);
# "[memory]" and "[OutOfMemory]" are handled on their own below.
