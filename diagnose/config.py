"""The run's options, typed, each default written once: the ground floor everything may import.

`Config` is one run's options; a layer's options are a group of their own
(`OperatorsOptions`, ...), and the layer that reads a group names it as its
`options` (layers/base.Layer.options). The CLI's flags for a group's fields
are declared beside them with `option(...)`, so cli.py builds them from the
layer registry; its run-wide flags take their defaults from `Config()`.
Frozen: a variant is `dataclasses.replace(config, ...)`. What a pass's child
gets of them travels in a protocol.PassSpec.

This module imports nothing of diagnose's: any module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# --skip-steps: the first steps pay for lazy initialisation (optimizer state, oneDNN primitive caches, the
# allocator's first pools, torch.compile's compilation and its recompile on a new shape); they settle by then
DEFAULT_SKIP_STEPS = 5
DEFAULT_STEPS = 20  # --steps: enough for a per-step median and IQR
STALL_AFTER_S = 60.0  # --stall-after's default: longer than any rendezvous or data fetch we have seen idle
# the operator pass's event budget: torch calls from Python it records before it stops recording
MAX_RECORDED_CALLS = 200_000
# the layers a run measures by default, in pass order (the registry, layers/__init__.py, holds exactly these)
DEFAULT_LAYERS = ("operators", "python", "threads", "microbench", "efficiency", "counters", "doctor")


def option(default: Any, flag: str, help: str, *, metavar: str | None = None, choices: tuple[str, ...] | None = None,
           minimum: float | None = None, what: str = "a value") -> Any:
    """A layer option the CLI offers as `flag` (its help may say {default}); a value under `minimum` is refused
    as "FLAG wants WHAT >= MINIMUM"."""
    return field(default=default, metadata={"flag": flag, "help": help, "metavar": metavar, "choices": choices,
                                             "minimum": minimum, "what": what})


@dataclass(frozen=True)
class OperatorsOptions:
    """The operator pass's options (Config.operators; the pass gets them as PassSpec.operators)."""

    profile_iters: int = option(20, "--profile-iters", "function mode: record at most the last N measured calls in "
                                "the operator pass ({default})", metavar="N", minimum=1, what="a number of calls")
    trace_max_events: int = option(100_000, "--trace-max-events", "cap on events written to trace.json ({default})",
                                   metavar="N", minimum=0, what="a number of events")
    max_recorded_calls: int = option(
        MAX_RECORDED_CALLS, "--max-recorded-calls", "the operator pass's event budget: stop recording after N torch "
        "calls from Python ({default}), or once recording grew the process by 1 GiB", metavar="N", minimum=1,
        what="a number of calls")
    track_modules: bool = True  # which module's forward runs (benchmarks/modules_overhead.py turns it off)
    # each call site's input bytes and time per step, and its list arguments' shapes (recorder.CallSite; the
    # trends and list shapes): benchmarks/sites_overhead.py turns it off
    track_sites: bool = True


@dataclass(frozen=True)
class CallgraphOptions:
    """--callgraph-*: what the call graph keeps and how long its tools may take (Config.callgraph; the python
    layer's pass gets them as PassSpec.callgraph)."""

    # A torch model's call graph at gprof2dot's defaults (0.5% / 0.1%) is a
    # hairball of torch internals; these keep the paths that matter readable.
    node_thres_pct: float = option(2.0, "--callgraph-nodes", "call graph: hide functions under PCT%% of the time "
                                   "({default:g})", metavar="PCT", minimum=0, what="a percentage")
    edge_thres_pct: float = option(0.5, "--callgraph-edges", "call graph: hide calls under PCT%% of the time "
                                   "({default:g})", metavar="PCT", minimum=0, what="a percentage")
    # "user": only functions under the script's directory (gprof2dot -p)
    focus: str = option("all", "--callgraph-focus", "call graph: all functions, or only those in your script's "
                        "directory ({default})", choices=("all", "user"))
    # gprof2dot and dot each, before they are stopped
    timeout_s: float = option(120.0, "--callgraph-timeout", "call graph: stop gprof2dot or graphviz's dot after S "
                              "seconds, and say so ({default:g})", metavar="S", minimum=0, what="seconds")


@dataclass(frozen=True)
class MicrobenchOptions:
    """--microbench-budget, --microbench-top (Config.microbench)."""

    budget_s: float = option(15.0, "--microbench-budget", "seconds for micro-benchmarks of the top operators at their "
                             "shapes, 1 thread vs all ({default:g}; 0 turns them off)", metavar="S", minimum=0,
                             what="seconds")
    top: int = option(3, "--microbench-top", "how many of the top operators to micro-benchmark ({default})",
                      metavar="K", minimum=1, what="a count")


@dataclass(frozen=True)
class SweepOptions:
    """--sweep, --sweep-repeats, --sweep-threads (Config.sweep)."""

    enabled: bool = False  # --sweep, --sweep-threads or --what-if threads
    repeats: int = option(2, "--sweep-repeats", "interleaved runs per sweep point ({default})", metavar="N",
                          minimum=1, what="a number of runs")
    threads: tuple[int, ...] | None = None  # None: thread_values(usable CPUs, the configured count)


# the doctor's and the what-if's trials (diagnose/doctor/trials.py): each runs FIRST_TRIAL_ROUNDS interleaved rounds,
# and a win (for its size) or a no gain those rounds cannot decide runs on to --trial-rounds
FIRST_TRIAL_ROUNDS = 3
TRIAL_ROUNDS = 9
# a finding is high from this share of the step at stake (findings/stake.py's severity lines); a won trial whose
# first rounds put its saving well above it does not run on for its size (doctor/trials.settled_win)
HIGH_MIN_PCT = 20.0


@dataclass(frozen=True)
class TrialOptions:
    """--trial-rounds (Config.trials): the doctor's and the what-if's trials."""

    rounds: int = option(TRIAL_ROUNDS, "--trial-rounds", "trials (doctor, what-if): the most interleaved rounds a "
                         f"trial runs; a win (for its size, unless settled) and a no gain its first "
                         f"{FIRST_TRIAL_ROUNDS} rounds cannot decide run on to N ({{default}}; {FIRST_TRIAL_ROUNDS}: never, and the report marks "
                         "it capped)", metavar="N", minimum=FIRST_TRIAL_ROUNDS, what="a number of rounds")


@dataclass(frozen=True)
class RepeatOptions:
    """--repeat (Config.repeat): the uninstrumented workload run this many times in all, so that a comparison
    can tell run-to-run drift from a change (layers/repeat.py, diagnose/compare.py)."""

    runs: int = option(1, "--repeat", "run the uninstrumented workload N times in all, each a fresh process, and "
                       "keep each run's median step: `diagnose compare` then tells a change from run-to-run drift "
                       "({default})", metavar="N", minimum=1, what="a number of runs")


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
    repeat: RepeatOptions = RepeatOptions()  # the uninstrumented workload again, for run-to-run drift
    sweep: SweepOptions = SweepOptions()  # re-run at several thread (and DataLoader worker) counts, recommend one
    trials: TrialOptions = TrialOptions()  # the doctor's and the what-if's trials: how many rounds at most
    doctor: bool = False  # --doctor: every trial this machine can run, not only those answering a warning
    what_if: tuple[str, ...] = ()  # --what-if: variant names, or ("auto",) (diagnose/whatif/variants.py)
    vtune: str | None = None  # hotspots, threading or uarch-exploration: a pass under `vtune -collect`
    nproc_per_node: int | None = None  # run every pass under torchrun with this many ranks (diagnose/distributed)
    torchrun_args: tuple[str, ...] = ()  # rendezvous options for several nodes
    # the memory layer's readings in the passes (layers/memory/; no flag: benchmarks/memory_overhead.py turns
    # it off to measure what it costs)
    memory: bool = True
    # --sample: py-spy samples the uninstrumented pass, a cross-check of the operator pass (layers/sample.py)
    sample: bool = False


# diagnose attach: py-spy's samples a second. With --native py-spy pauses the process while it unwinds each native
# stack. On examples/mlp.py's training step with both CPUs busy, on a quiet 2-CPU EPYC, 40 pairs of 3 s windows
# alone / sampled (benchmarks/RESULTS.md, "diagnose attach: the target's step time while sampled"): +4.1% [+2.8%,
# +5.0%] at 10 Hz, over the 3% a sampler may cost; +2.1% [+0.7%, +4.3%] at 5 Hz. So 5 Hz: 150 samples a thread in
# the default 30 s, a share to about 8 points (--rate 10 or a longer --duration for more)
ATTACH_RATE_HZ = 5.0
# --sample: the cross-check of the operator pass samples the uninstrumented pass's window, seconds long, at twice
# attach's rate for samples enough to compare shares; that pass's step times carry its ~4% (layers/sample.py says so)
SAMPLE_RATE_HZ = 10.0
ATTACH_DURATION_S = 30.0
ATTACH_RSS_INTERVAL_S = 0.25  # the RSS of the tree read this often (diagnose/attach: memory growth over time)


@dataclass(frozen=True)
class AttachConfig:
    """diagnose attach PID's options (diagnose/attach/)."""

    pid: int
    duration_s: float = ATTACH_DURATION_S
    rate_hz: float = ATTACH_RATE_HZ
    output_dir: str | None = None
    force: bool = False
    reports_root: str = Config.reports_root
