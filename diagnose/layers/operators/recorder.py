"""Operators layer, child side: torch.profiler over the measured part of the workload, with source lines.

`OperatorsRecorder` runs inside the pass's child (diagnose/runner.py): a
TorchFunctionMode installed before the target runs (so that torch.compile
sees it from the start and nothing recompiles when the window begins) labels
every torch call made from Python, while the window is recorded, with a
`record_function` range named after the innermost user frame and its current
line; every operator below that label in the event tree belongs to that line.
Backward and optimizer ops land on the `loss.backward()` / `opt.step()` line.
torch 2.13's own `with_stack` frames carry each function's *definition* line,
and its Python tracer combined with record_function corrupts event names now
and then, hence the mode.

At the end `collect()` reduces the raw kineto events (kineto.py) to raw rows
and writes trace.json, and estimates per-call work of the hot rows while
torch is loaded (efficiency/work.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Any

from diagnose.layers.base import Recorder
from diagnose.layers.operators.kineto import SOURCE_PREFIX, reduce_kineto

# Calls that never run an operator; skipping them keeps the mode cheap.
_NO_OP_CALLS = frozenset(
    {"__get__", "__set__", "size", "dim", "stride", "numel", "__len__", "is_contiguous",
     "data_ptr", "element_size", "__hash__", "__repr__", "__format__", "storage_offset"}
)



# The operator pass's event budget: recording stops after this many torch calls from Python, or once the
# process grew by MAX_RECORDING_GROWTH_BYTES while recording (checked every 1024 calls), so that a script
# without steps, recorded whole, stays bounded. The growth is mostly glibc heap fragmentation: the profiler's
# small per-event allocations pin freed activation memory (measured on examples/mlp.py: ~3-5 MB per training
# step; malloc_trim gives it all back), so the limit is on memory, the count a backstop.
MAX_RECORDED_CALLS = 200_000
MAX_RECORDING_GROWTH_BYTES = 1 << 30
_BUDGET_CHECK_EVERY = 1024


def _source_mode(recorder: "OperatorsRecorder"):
    import torch
    from torch.overrides import TorchFunctionMode

    record_function = torch.profiler.record_function
    is_compiling = torch.compiler.is_compiling
    location = recorder.usercode.location

    class SourceMode(TorchFunctionMode):
        """Labels each torch call with the user line that made it, while the recorder records.

        Installed for the whole run (prepare/release), so that torch.compile traces the same mode stack
        from the first call on; inside a compiled region it does nothing.
        """

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not recorder.active or getattr(func, "__name__", "") in _NO_OP_CALLS or is_compiling():
                return func(*args, **kwargs)
            recorder.calls += 1
            if recorder.calls % _BUDGET_CHECK_EVERY == 0 and recorder.over_budget():
                recorder.stop()
                return func(*args, **kwargs)
            loc = location(sys._getframe(1))
            with record_function(SOURCE_PREFIX + (loc or "?")):
                return func(*args, **kwargs)

    return SourceMode()


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class OperatorsRecorder(Recorder):
    def __init__(self, spec: dict[str, Any]):
        from diagnose.usercode import UserCode

        self.spec = spec
        options = spec.get("options", {})
        self.usercode = UserCode(spec["script"], cwd=spec.get("cwd"))
        self.max_trace_events = int(options.get("trace_max_events", 100_000))
        self.window = int(options.get("profile_iters", 20))
        self.max_calls = int(options.get("max_recorded_calls") or MAX_RECORDED_CALLS)
        self.prof = None
        self.mode = None
        self.active = False
        self.calls = 0
        self.budget_note = None
        self.rss0 = 0
        # The recorded profile and its raw kineto results, kept from the
        # profiler's stop until collect() reduces them.
        self.profile = None
        self.results = None
        self.steps = 0
        self.schedule_note = None

    def prepare(self) -> None:
        self.mode = _source_mode(self)
        self.mode.__enter__()

    def release(self) -> None:
        mode, self.mode = self.mode, None
        if mode is not None:
            mode.__exit__(None, None, None)

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        self.profile = self.results = self.budget_note = None
        self.calls = 0
        self.rss0 = _rss_bytes()
        sched = None
        iters = self.spec.get("iters") if self.spec.get("mode") == "function" else None
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
        )
        self.prof.__enter__()
        self.active = True

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

    def stop(self) -> None:
        self.active = False
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
            if self.results is None and (not self.schedule_note or self.budget_note):
                self._ready(prof)

    def collect(self, workdir: str) -> dict[str, Any]:
        reduced = reduce_kineto(self.results, os.path.join(workdir, "trace.json"), self.max_trace_events)
        if self.spec.get("distributed"):  # a torchrun rank: its collectives (gloo:all_reduce, ...) too
            from diagnose.distributed import collectives

            reduced["collectives"] = collectives.summarise(self.results)
        attach_work(reduced.get("rows") or [])
        return {
            **reduced,
            "window": self.schedule_note,
            "recorded_iters": self.window if self.schedule_note else None,
            "recorded_calls": self.calls,
            "budget": self.budget_note,
        }


WORK_MIN_SHARE = 0.01  # rows with >= 1% of self time get a work estimate (the efficiency layer's hot rows)
WORK_MAX_ROWS = 24


def attach_work(rows: list[dict[str, Any]]) -> None:
    """Per-call FLOPs and bytes of the hot (operator, shapes), estimated here where torch is loaded.

    The efficiency layer would otherwise start a process (and import torch)
    to do it; estimating on meta tensors takes milliseconds per row.
    """
    from diagnose.layers.efficiency.work import estimate

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
                    done[key] = estimate(r)
                except Exception as exc:  # noqa: BLE001 - the efficiency layer reports rows without work
                    done[key] = {"flops": None, "bytes": None, "reason": f"{type(exc).__name__}: {exc}"}
            r["work"] = done[key]


# Names torch drops before it builds FunctionEvents (torch.autograd.profiler_util._filter_name);
# "[memory]" and "[OutOfMemory]" are handled on their own below.
