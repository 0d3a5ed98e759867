"""The run's options, typed, each default written once: the ground floor everything may import.

`Config` is one run's options; a layer's options are a group of their own
(`OperatorsOptions`, ...), and the layer that reads a group names it as its
`options` (layers/base.Layer.options, the registry in layers/__init__.py).
The CLI's defaults and help come from these defaults (cli.py reads `Config()`).
Frozen: a variant is `dataclasses.replace(config, ...)`. What a pass's child
gets of them travels in a protocol.PassSpec.

This module imports nothing of diagnose's: any module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

# --skip-steps: the first steps pay for lazy initialisation (optimizer state, oneDNN primitive caches, the
# allocator's first pools, torch.compile's compilation and its recompile on a new shape); they settle by then
DEFAULT_SKIP_STEPS = 5
DEFAULT_STEPS = 20  # --steps: enough for a per-step median and IQR
STALL_AFTER_S = 60.0  # --stall-after's default: longer than any rendezvous or data fetch we have seen idle
# the operator pass's event budget: torch calls from Python it records before it stops recording
MAX_RECORDED_CALLS = 200_000
# the layers a run measures by default, in pass order (the registry, layers/__init__.py, holds exactly these)
DEFAULT_LAYERS = ("operators", "python", "threads", "microbench", "efficiency", "counters", "doctor")


@dataclass(frozen=True)
class OperatorsOptions:
    """The operator pass's options (Config.operators; the pass gets them as PassSpec.operators)."""

    trace_max_events: int = 100_000  # events written to trace.json
    profile_iters: int = 20  # function mode: the last N measured calls are recorded (a profiler schedule)
    max_recorded_calls: int = MAX_RECORDED_CALLS  # the event budget: torch calls from Python
    track_modules: bool = True  # which module's forward runs (benchmarks/modules_overhead.py turns it off)


@dataclass(frozen=True)
class CallgraphOptions:
    """--callgraph-*: what the call graph keeps and how long its tools may take (Config.callgraph; the python
    layer's pass gets them as PassSpec.callgraph)."""

    # A torch model's call graph at gprof2dot's defaults (0.5% / 0.1%) is a
    # hairball of torch internals; these keep the paths that matter readable.
    node_thres_pct: float = 2.0
    edge_thres_pct: float = 0.5
    focus: str = "all"  # "user": only functions under the script's directory (gprof2dot -p)
    timeout_s: float = 120.0  # gprof2dot and dot each, before they are stopped


@dataclass(frozen=True)
class MicrobenchOptions:
    """--microbench-budget, --microbench-top (Config.microbench)."""

    budget_s: float = 15.0  # seconds for the micro-benchmarks of the top operators; 0: the layer is off
    top: int = 3  # how many of the top operators


@dataclass(frozen=True)
class SweepOptions:
    """--sweep, --sweep-repeats, --sweep-threads (Config.sweep)."""

    enabled: bool = False  # --sweep, --sweep-threads or --what-if threads
    repeats: int = 2  # interleaved runs per point
    threads: tuple[int, ...] | None = None  # None: thread_values(usable CPUs, the configured count)


@dataclass(frozen=True)
class Config:
    """One run's options (the CLI's defaults are these)."""

    output_dir: str | None = None
    force: bool = False
    reports_root: str = "reports"  # where the default output directory goes
    timeout_s: float | None = None
    stall_after_s: float = STALL_AFTER_S  # a pass whose tree used no CPU this long is hung (0: never; stall.py)
    layers: tuple[str, ...] = DEFAULT_LAYERS
    baseline: bool = True  # False: skip the uninstrumented pass (quick single-layer commands)
    fork_server: bool = True  # fork the passes from a process with torch imported (diagnose/forkserver.py)
    # the window every pass measures (diagnose/steps.py): steps in script mode, calls of the function in
    # function mode
    skip_steps: int = DEFAULT_SKIP_STEPS
    steps: int = DEFAULT_STEPS
    full_run: bool = False  # record the whole run in every pass (steps are still counted)
    operators: OperatorsOptions = OperatorsOptions()
    callgraph: CallgraphOptions = CallgraphOptions()  # the python layer's call graph
    microbench: MicrobenchOptions = MicrobenchOptions()
    sweep: SweepOptions = SweepOptions()  # re-run at several thread (and DataLoader worker) counts, recommend one
    doctor: bool = False  # --doctor: every trial this machine can run, not only those answering a warning
    what_if: tuple[str, ...] = ()  # --what-if: variant names, or ("auto",) (diagnose/whatif/variants.py)
    vtune: str | None = None  # hotspots, threading or uarch-exploration: a pass under `vtune -collect`
    nproc_per_node: int | None = None  # run every pass under torchrun with this many ranks (diagnose/distributed)
    torchrun_args: tuple[str, ...] = ()  # rendezvous options for several nodes
