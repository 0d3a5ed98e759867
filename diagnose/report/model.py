"""The report model: data only, no behaviour beyond derived views.

Field names and meanings of the top level, `operators` rows and `findings`
rows follow docs/report.md; units live in the names (`_us`, `_s`).

Schema history (bump SCHEMA_VERSION on any rename or removal, and add a
migration to io.MIGRATIONS):
  "1" - first version: target, machine, run, layers, operators,
        python_hotspots, threads, microbenchmarks, findings, artifacts;
        efficiency and counters added later (additive: no version bump);
        distributed added later (additive, empty for a single process);
        steps added later (additive: script mode's step detection, window,
        setup and data wait); operator rows' module path, library line,
        per-call min/max, `modules` (the module time table) and `stacks`
        (folded stacks) added later (additive); compile (torch.compile's
        compile time, graph breaks, recompiles) added later (additive);
        hangs (stalled passes with their stacks) added later (additive);
        doctor (environment checks and measured trials) added later
        (additive).
  "2" - every section typed (report v2): threads, efficiency, counters,
        distributed, microbenchmarks, operator_summary and python_summary
        are dataclasses; a section with nothing measured is null instead of
        {}. io._v1_to_v2 reads "1" files.
  "3" - a finding's ranking is typed: the time at stake, its basis and
        confidence (`stake`, a Stake), `observation`, `doubts`, where it ran
        (`place`: module, module class, library line), the severity's
        provenance (`rule_severity`, `severity_basis`, `severity_from`) and
        the findings merged into it (`also`, a list of Finding) are fields of
        Finding instead of keys of its `evidence`, which keeps only the
        rule's own measurements. io._v2_to_v3 reads "2" files.
        memory (growth per step, projection, what keeps it alive, the peak)
        added later (additive: no version bump; null in older reports);
        step_budget added later (additive).
  "4" - results the tool doubts itself (a finding with `doubts`: a noisy or
        contended micro-benchmark, a flat large GEMM, roofs measured under
        load) leave `findings` for `not_confirmed` (NotConfirmed: the finding
        and the command that re-measures it); `verdict` (healthy or not, with
        the numbers) added. io._v3_to_v4 moves a "3" report's doubted
        findings; its verdict is null (not judged). The operator pass's
        freed_in_operators_bytes and the probe's page costs (CallCosts.pages)
        added later (additive: null or empty in older reports).
        Operator rows' `processes` (the process role and Python thread
        their calls ran in) and operator_summary's `children` and
        `not_recorded` (processes the target started) added later
        (additive: empty in older reports).
        a trial's no_effect (why its change provably changes nothing here)
        added later (additive: null in older reports).
        `sampled` (diagnose attach PID: operators, Python lines, libraries and
        steps from sampled stacks), target.pid and memory growth's
        interval_s added later (additive: null in older reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = "4"

SEVERITIES = ("high", "medium", "low")
LAYER_STATUSES = ("ok", "skipped", "failed")


@dataclass
class TargetInfo:
    script: str  # the target's path as given on the command line
    argv: list[str] = field(default_factory=list)  # the arguments the script received
    mode: str = "script"  # "script", "function" or "attach" (a running process sampled from outside)
    function: str | None = None  # function mode: the zero-argument function called once per step
    warmup: int | None = None  # function mode: calls before the measured ones (--skip-steps)
    iters: int | None = None  # function mode: measured calls (--steps)
    pid: int | None = None  # attach mode (diagnose attach PID): the process attached to
    # what `diagnose compare --repeat` needs to run the target again as it ran (diagnose/interleave.py); None in
    # reports written before they were recorded, and in attach mode
    path: str | None = None  # the script's absolute path
    cwd: str | None = None  # the working directory the script ran in
    script_sha256: str | None = None  # the script file's SHA-256 when it ran: a changed script is not re-run


@dataclass
class Machine:
    cpu_model: str = ""  # /proc/cpuinfo's model name
    logical_cpus: int = 0  # os.cpu_count()
    usable_cpus: int = 0  # what the target can run on: affinity and the cgroup quota applied
    affinity_cpus: int = 0  # CPUs in the process's affinity mask
    cgroup_cpu_limit: float | None = None  # cgroup CPU quota in CPUs (cpu.max), None: no limit
    # torch.__version__ in the first pass's process; None when that pass left no result
    torch_version: str | None = None
    parallel_backend: str | None = None  # "ATen parallel backend" of torch.__config__.parallel_info()
    intra_op_threads: int | None = None  # as the target left it (after its own set_num_threads)
    inter_op_threads: int | None = None  # torch.get_num_interop_threads()
    default_intra_op_threads: int | None = None  # before the target ran
    threading_env: dict[str, str] = field(default_factory=dict)  # OMP_*/MKL_*/KMP_*/... variables that were set
    python_version: str = ""  # platform.python_version() of diagnose's interpreter, which runs the passes too
    platform: str = ""  # platform.platform()


@dataclass
class IterationStats:
    """Per-iteration wall times of a function-mode pass."""

    n: int  # steps (or calls) measured
    median_s: float  # per step
    q1_s: float  # first and third quartiles
    q3_s: float  # third quartile (statistics.quantiles, n=4)
    min_s: float  # the fastest step (or call)
    max_s: float  # the slowest step (or call)

    @property
    def iqr_over_median(self) -> float:
        return (self.q3_s - self.q1_s) / self.median_s if self.median_s > 0 else 0.0


@dataclass
class Repeats:
    """--repeat N: the uninstrumented workload run N times in all, each a fresh process (layers/repeat.py)."""

    unit: str  # what each median is per: "step" (the window's steps), "call" (function mode) or "run"
    medians_s: list[float] = field(default_factory=list)  # each run's median, the first pass's first
    failed: int = 0  # re-runs that ended without a timing
    # (slowest - fastest) / median of the runs' medians, in percent: the run-to-run drift a comparison must
    # exceed (diagnose/compare.py); None with fewer than two runs
    spread_pct: float | None = None


@dataclass
class Run:
    # what `python script.py` would have exited with: 0, sys.exit's code, 1 for an exception, 130 for Ctrl-C;
    # None when the pass left no result
    exit_code: int | None = None
    # why the target ended early, one line: "ValueError: ...", "the target called sys.exit(3)"; None: it did not
    error: str | None = None
    traceback: list[str] = field(default_factory=list)  # "file.py:LINE in function: code", the last 12 frames
    wall_s: float | None = None  # uninstrumented pass: the measured calls (function mode) or the window of steps
    instrumented_wall_s: float | None = None  # operator pass, same span
    pass_s: float | None = None  # the uninstrumented pass from start to exit: what one re-run of it costs
    iterations: IterationStats | None = None  # uninstrumented: per call (function mode) or per step of the window
    instrumented_iterations: IterationStats | None = None  # the operator pass's, same window
    repeats: Repeats | None = None  # --repeat N: each uninstrumented run's median (None: one run)
    # minor page faults of the target's process over the same span (fresh pages touched): uninstrumented,
    # and in the operator pass, whose profiler fragments the heap into fresh pages for large temporaries
    minor_faults: int | None = None
    # the operator pass's count (see minor_faults); None without an operator pass
    instrumented_minor_faults: int | None = None
    interrupted: bool = False  # Ctrl-C (or SIGTERM): what was measured before it is still reported
    timed_out: bool = False  # --timeout ended a pass
    started_at: str = ""  # local time, ISO 8601 with the UTC offset
    diagnose_version: str = ""  # diagnose.__version__ of the diagnose that wrote the report

    @property
    def overhead_ratio(self) -> float | None:
        """Instrumented / uninstrumented wall time of the same work."""
        a, b = self.instrumented_wall_s, self.wall_s
        if self.iterations and self.instrumented_iterations:
            a, b = self.instrumented_iterations.median_s, self.iterations.median_s
        return a / b if a and b else None


@dataclass
class TrendSlope:
    """A line through per-step values against the step's index, with its 95% interval; the later half's slope
    beside it. Times (step drift, a site's time): Theil-Sen with Sen's interval (diagnose/trends.robust_line);
    exact values (a site's input bytes): ordinary least squares (diagnose/trends.line)."""

    per_step: float  # the slope: the value's change a step, in the unit of the values it was fitted to
    ci_low: float  # the 95% interval's low end
    ci_high: float  # the 95% interval's high end
    late_per_step: float | None = None  # the later half of the window's own slope; None: too few steps
    late_ci_high: float | None = None  # the high end of that slope's 95% interval (what the later half may still rise)


@dataclass
class StepDrift:
    """Step time against the step's index over the window (uninstrumented pass, trends.py)."""

    slope: TrendSlope  # seconds a step
    median_s: float  # the window's median step
    change_pct: float  # the line's rise over the window, in percent of the median step
    drifts: bool  # beyond noise: the interval above 0, a rise of at least trends.DRIFT_MIN_PCT, the later half too
    verdict: str  # in words, with the numbers


@dataclass
class StepWork:
    """The operator pass's steps of the window, call by call (trends.step_work): whether each step did the same
    work, and where the step's time rose, in its calls or between them. A drift of the script's work shows as
    more calls or bytes, or as more time outside the calls (Python); the same calls on the same bytes taking
    longer is the machine's load or clock (findings/trends.py step_drift)."""

    same_work: bool  # every call site ran the same number of calls on the same tensor input bytes in every step
    sites: int  # call sites (user line, library line, module, torch function) in the window
    calls_per_step: int  # all sites' calls in the window's first step
    calls: StepDrift  # the sites' calls' time per step (Python call to return) against the step
    outside: StepDrift | None = None  # the step's time outside those calls; None: the step times did not match


@dataclass
class SiteTrend:
    """A call site (user line, library line, module, torch function) whose input bytes or time grew step over step
    in the operator pass's window (trends.py)."""

    source: str | None  # the user line
    library: str | None  # the library line (inside a library model)
    module: str | None  # the module whose forward ran it
    function: str  # the torch function called there: "cat"
    calls: int  # in the window
    share_pct: float  # its time (Python call to return, profiler included) of all sites' time, in percent
    bytes_per_step: list[int] = field(default_factory=list)  # its calls' tensor input bytes, step by step
    seconds_per_step: list[float] = field(default_factory=list)  # its calls' time, step by step
    bytes_slope: TrendSlope | None = None  # bytes a step
    time_slope: TrendSlope | None = None  # seconds a step
    bytes_grow: bool = False  # the input grows beyond noise (trends.grows)
    time_grows: bool = False  # its time grows beyond noise


@dataclass
class Steps:
    """Script mode: the steps diagnose found and the window every pass measured (diagnose/steps.py).

    Per-step times of the window are `run.iterations` (uninstrumented pass);
    the window's wall time is `run.wall_s`.
    """

    detector: str | None = None  # optimizer, forward, mark_step, loop; None: no step found (the whole run is measured)
    detail: str | None = None  # e.g. "SGD.step()", "BertModel forward", "diagnose.mark_step() at train.py:40"
    steps_seen: int = 0  # steps the uninstrumented pass ran (up to the window's end when it ended the target there)
    skip_steps: int = 0  # requested: --skip-steps
    steps: int = 0  # requested: --steps
    window_first: int | None = None  # first and last step measured by every pass (1-based), None without a window
    window_last: int | None = None  # last step measured by every pass (1-based); None without a window
    full_run: bool = False  # --full-run: every pass recorded the whole run
    ended_target: bool = False  # the passes ended the target once their window was measured
    batch_size: int | None = None  # dim 0 of the outermost module's first tensor input
    setup_s: float | None = None  # from the workload's start (torch imported) to the first step's start
    data_wait_s: float | None = None  # window: time inside DataLoader iterators' __next__
    data_wait_at: str | None = None  # "file.py:LINE" that iterates the DataLoader (most of the wait)
    warmup_s: list[float] = field(default_factory=list)  # the skipped steps' times (at most 200), in order
    window_s: list[float] = field(default_factory=list)  # the window's step times (uninstrumented pass), in order
    drift: StepDrift | None = None  # step time against the step over the window; None: too few steps
    # the same fit over the operator pass's steps of the same window: a drift of the script's work shows in both
    # passes, a machine's load rarely at the same steps (findings/trends.py step_drift); None: not measured
    instrumented_drift: StepDrift | None = None
    # the operator pass's steps call by call: the same work each step, and whether its calls' time rose
    instrumented_work: StepWork | None = None
    # how the steps were found and measured: no step found, a window shorter or longer than --steps, ...
    notes: list[str] = field(default_factory=list)
    # the steps each re-run compared only with other re-runs (doctor trials, what-if, sweep points) measured, the
    # window's first ones, when fewer than the window's (steps.RERUN_WINDOW_S); None: the whole window
    rerun_steps: int | None = None

    @property
    def window_steps(self) -> int:
        if self.window_first is None or self.window_last is None:
            return 0
        return self.window_last - self.window_first + 1


@dataclass
class GraphBreak:
    reason: str  # torch._dynamo's first line for it
    count: int  # times torch._dynamo counted it


@dataclass
class Recompile:
    code: str  # "forward at model.py:12": the function torch.compile compiled again
    reasons: list[str]  # the guards that failed, as torch._dynamo words them
    count: int  # guard failures torch._dynamo recorded for it: its recompiles


@dataclass
class Compile:
    """torch.compile in the uninstrumented pass: a phase of its own, a one-time cost, never an operator."""

    compile_s: float | None = None  # torch._dynamo's compile time, all frames (compile_inner)
    in_window_s: float | None = None  # of which inside the measured window (a recompile there)
    frames: int = 0  # frames torch._dynamo processed (its frames counter's total)
    graphs: int = 0  # unique graphs torch._dynamo compiled
    # torch._dynamo's graph-break counter by reason, most first (at most 20)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    # functions whose guards failed and that were compiled again (at most 20)
    recompiles: list[Recompile] = field(default_factory=list)
    error: str | None = None  # torch's counters could not be read


@dataclass
class ThreadStack:
    thread: str  # faulthandler's id, 0x...
    main: bool  # the target's main thread (the one running the script)
    frames: list[str]  # "file.py:LINE in function", innermost first


@dataclass
class Hang:
    """A pass whose process tree stopped using the CPU (diagnose/stall.py), and where each thread stood."""

    pass_name: str  # the pass that hung: "baseline" or a layer's (operators, python, vtune)
    idle_s: float  # seconds the process tree used < 2% of one CPU before the pass was declared hung (--stall-after)
    rank: int | None = None  # under torchrun
    location: str | None = None  # the innermost line of the user's code in the main thread
    stuck_in: str | None = None  # the main thread's innermost frame: where it waits
    # every Python thread's stack then (faulthandler), diagnose's own frames left out
    threads: list[ThreadStack] = field(default_factory=list)


@dataclass
class Fact:
    """One reading behind a doctor check: what was read, its value and unit, and where from."""

    name: str  # "minor faults per step", "allocator", "nr_throttled"
    value: str | float | int | bool | None  # the reading, in `unit`; None: not known
    unit: str = ""  # "", "faults", "%", "us", ...
    source: str = ""  # "/proc/PID/maps", "/sys/fs/cgroup/cpu.stat", "operator pass", ...


@dataclass
class DoctorCheck:
    """One environment check (diagnose/doctor: environment.py and workload.py): what it read and what it concluded."""

    name: str  # page_faults, denormals, openmp_runtimes, blas_threads, cpu_quota, topology, low_precision
    status: str  # "ok" (nothing wrong), "warn" (a problem, see summary), "skipped" (could not read; summary says why)
    summary: str  # one line
    facts: list[Fact] = field(default_factory=list)  # the readings behind its conclusion
    suggestion: str | None = None  # what to change (trials naming this check measure it from outside)
    at_stake_pct: float | None = None  # share of the step time the problem may cost (estimate), for ranking


@dataclass
class NoEffect:
    """Why a trial's change provably changes nothing on this workload: a structural fact read from the run, not a
    timing (diagnose/doctor/trials.py `judge` decides it before any statistic: the trial is then "no gain", never a
    win, whatever its timings say)."""

    # "no compiled graph", "no tensor converted", "autograd recorded nothing", "no page faults",
    # "no subnormal values"
    reason: str
    evidence: str  # the reading it rests on: "torch._dynamo compiled 0 graphs in each of 3 runs; ..."


@dataclass
class Trial:
    """An A/B of the user's own workload with one change applied from outside (diagnose/doctor/trials.py)."""

    # "jemalloc", "tcmalloc", "glibc_malloc_thresholds", "flush_denormal", "bind_threads", "quota_threads",
    # "blas_one_thread", "intra_op_threads"; in what_if.variants the variant's name
    name: str
    # the DoctorCheck whose suggestion it measures ("page_faults", "denormals"); for intra_op_threads the threads
    # finding whose recommended count it measures ("undersubscription", "oversubscription")
    check: str
    change: str  # the exact change: a launch line (`LD_PRELOAD=... python train.py`) or a line of code
    env: dict[str, str] = field(default_factory=dict)  # environment the variant ran with
    rounds: int = 0  # rounds of interleaved passes (each round: the baseline and every variant once)
    # baseline / variant in each round, in the order they ran (each side's step: its pass's lower quartile): the
    # first 3 (config.FIRST_TRIAL_ROUNDS) decide, the rest are a run-on's: what the verdict and size rest on
    round_ratios: list[float] = field(default_factory=list)
    # a side's step (or call) time: the lower quartile of its passes' steps (a shared CPU adds waits to some of
    # them; diagnose/doctor/trials.py), baseline passes
    baseline_step_s: float | None = None
    variant_step_s: float | None = None  # the same, variant passes
    speedup: float | None = None  # baseline / variant (>1: the change is faster)
    ci_low: float | None = None  # 95% interval of the speedup
    ci_high: float | None = None  # its upper end; None (as ci_low) when a pass had fewer than two steps
    noise_floor_pct: float | None = None  # same-setting variation between passes
    # how the verdict was reached (diagnose/doctor/trials.py): "pooled" (the first rounds: the pooled steps, their
    # bootstrap interval, the noise floor, every round agreeing) or "rounds" (the first rounds could not tell, or
    # called a win, so it ran on: the median round ratio as the speedup, its sign-test interval as ci_low/ci_high); a
    # win whose first rounds' interval starts at trials.SETTLED_SPEEDUP or more stops there, "pooled"
    method: str = "pooled"
    # it would have run on (trials.runs_on: the first rounds could not decide it, or called a win) and --trial-rounds
    # kept it at its first rounds: its verdict and size are theirs, which a longer trial might have changed
    capped: bool = False
    # a trial that would have run on (for a win's size, or because its first rounds could not tell) and did not
    # because another change of its check, an alternative to it (the doctor's allocators exclude each other), led the
    # check after those rounds and ran on in its place (trials.run_trials `one_per_check`: the surest decided win,
    # else the likeliest undecided one, trials.likeliest): that change's name. Its verdict and size are its first
    # rounds'
    led_by: str | None = None
    # "win" (faster outside the noise: recommended), "no gain", "slower", "failed", "skipped", "deferred" (not run
    # while the threads were oversubscribed: trials.defer)
    verdict: str = "skipped"
    reason: str | None = None  # why skipped, failed or deferred
    # why the change provably changes nothing here (then the verdict is "no gain", whatever the timings); None: no
    # such structural fact, the statistics decide
    no_effect: NoEffect | None = None

    @property
    def saved_pct(self) -> float | None:
        """The share of the step the change saved (`saving_pct`) to 0.1: a measured stake (findings/stake.measured)
        and the step budget's allocator slice read this one number."""
        saved = saving_pct(self.speedup)
        return None if saved is None else round(saved, 1)


def saving_pct(speedup: float | None) -> float | None:
    """The share of a step a speedup saves, in %: 1 - 1/speedup, 0 for a slowdown; None without a speedup."""
    return None if not speedup or speedup <= 0 else max(0.0, 100.0 * (1.0 - 1.0 / speedup))


def surest(trials: list[Trial]) -> Trial | None:
    """Of the trials that won, the one whose 95% interval's low end is highest, the largest gain the
    measurement supports; then the larger speedup; None when none won. A win is decided on its first rounds
    and runs on for its size (doctor/trials.py), and its nine-round interval can then reach under 1x beside
    another win that stays clear of it: examples/conv_nchw.py's glibc thresholds 1.47x (0.96-1.57x) beside
    jemalloc's 1.36x (1.10-1.60x). Chosen by speedup, the first made the finding it leads low, at the low end
    of its interval, where the second measured a saving of 9% or more (2026-11-28). A trial without an
    interval (a script without steps: every round faster) counts its speedup. A win that another change of its
    check led (`led_by`: it did not run on) is taken only when no win that ran on is left: its interval is its
    first rounds', which three agreeing rounds can overstate (doctor/trials.py FEW_ROUNDS_OVERSTATED)."""
    wins = [t for t in trials if t.verdict == "win" and t.speedup]
    wins = [t for t in wins if t.led_by is None] or wins  # a win that ran on for its size before one that did not
    return max(wins, key=lambda t: (t.ci_low if t.ci_low is not None else t.speedup, t.speedup)) if wins else None


@dataclass
class SubnormalScan:
    """Subnormal values in one tensor the workload computes with (diagnose/doctor/process.py)."""

    tensor: str  # "encoder.weight" (a parameter or buffer of the outermost module), "input 0"
    shape: list[int]  # the tensor's shape
    dtype: str  # torch's name: "float32"
    scanned: int  # values looked at (a strided sample of large tensors)
    nonzero: int  # nonzero values among those scanned
    subnormal: int  # nonzero values below the dtype's smallest normal number (torch.finfo(dtype).tiny)


@dataclass
class ProcessFacts:
    """Read inside the target's process by the uninstrumented pass, around its window (diagnose/runner.py)."""

    libraries: list[str] = field(default_factory=list)  # shared objects mapped at the window's end (/proc/self/maps)
    # OpenBLAS path -> its thread pool was started in this run (a threaded BLAS call ran); known only in a pass
    # forked from the fork server (diagnose/doctor/process.py blas_pools), else empty
    blas_pools: dict[str, bool] = field(default_factory=dict)
    cpu_stat_path: str | None = None  # the process's cgroup cpu.stat, None when there is none
    cpu_stat_before: dict[str, int] = field(default_factory=dict)  # its counters at the window's start and end
    cpu_stat_after: dict[str, int] = field(default_factory=dict)  # its counters at the window's end
    # the outermost module's parameters and buffers and its last forward's tensor inputs, largest first
    subnormals: list[SubnormalScan] = field(default_factory=list)
    subnormal_scope: str | None = None  # what was scanned, or why nothing was
    # the operator pass's scan: each torch call site's tensor inputs in the last step before the window
    # (tensor: "linear input 1 at transformers/models/bert/modeling_bert.py:LINE at bert.py:40")
    operator_inputs: list[SubnormalScan] = field(default_factory=list)
    operator_inputs_scope: str | None = None  # what was scanned, or why nothing was


@dataclass
class BaselinePass:
    """One baseline pass of the doctor's trials: the uninstrumented workload again in a process of its own, the
    same window (diagnose/doctor/trials.py Counted). Beside the uninstrumented pass, what the checks read of
    the workload's processes: glibc's heap and the CPU a process runs on differ from one process to the next."""

    name: str  # the pass: "trial-4-baseline"
    steps: int  # the window's steps (function mode: measured calls)
    median_s: float  # their median time
    minor_faults: int | None = None  # its minor page faults over the window (/proc/self/stat); None: not read


@dataclass
class Doctor:
    """The environment doctor: checks from /proc, sysfs and the profile, and the measured trials."""

    process: ProcessFacts | None = None  # readings from inside the target (None: the pass wrote none)
    # the checks, in a fixed order (doctor.checks; blas_threads and cpu_quota need `process`)
    checks: list[DoctorCheck] = field(default_factory=list)
    # the trials run: for checks that warned, every one with --doctor; [] when none ran
    trials: list[Trial] = field(default_factory=list)
    launch: str | None = None  # the launch line with every winning change, None when none won
    # the trials' baseline passes, in the order they ran ([] when no trial ran): the page-fault check's share is
    # read over them and the uninstrumented pass (doctor/workload.py)
    baselines: list[BaselinePass] = field(default_factory=list)

    def best_win(self, check: str) -> Trial | None:
        """The winning trial of `check`'s suggestion that `surest` picks, None when none won (the one choice the
        doctor's finding, its launch line and the step budget's allocator slice all read)."""
        return surest([t for t in self.trials if t.check == check])


@dataclass
class LayerStatus:
    status: str  # ok, skipped, failed
    reason: str | None = None  # why skipped or failed (and how to get the missing part), None when ok
    elapsed_s: float | None = None  # the layer's pass and analysis
    notes: list[str] = field(default_factory=list)  # caveats on what it measured
    missing: dict[str, str] = field(default_factory=dict)  # artifact the layer could not make -> why


@dataclass
class SourceShare:
    location: str | None  # file.py:LINE in the user's code, None: no user frame
    calls: int  # calls of the row's operator from this line, in the operator pass's window
    self_cpu_us: float  # the row's self time from this line
    function: str | None = None  # the user function holding `location`
    # the fastest call from this line: calls x it is the line's undisturbed work (report/rows.py tied_first)
    min_self_us: float | None = None


@dataclass
class ProcessShare:
    """The part of an operator row run in one role of process and one Python thread (layers/operators/)."""

    # main (the target's own process), pool worker (multiprocessing.Pool, ProcessPoolExecutor), DataLoader worker,
    # process (another multiprocessing.Process), forked child (os.fork()): diagnose/protocol.py's roles
    role: str
    thread: str | None  # the Python thread's name ("MainThread", "ThreadPoolExecutor-0_1"); None: one torch started
    calls: int
    self_cpu_us: float


@dataclass
class ModuleShare:
    """The part of an operator row run inside one module's forward (or its backward), from one library line."""

    module: str | None  # module path from the outermost module ("" is that module itself); None: outside any
    module_class: str | None  # that module's class name
    library_line: str | None  # innermost frame outside torch (a library's line, or yours in your own model)
    calls: int  # calls of the row's operator from this module and library line, in the operator pass's window
    self_cpu_us: float  # their self CPU time


@dataclass
class ModuleRow:
    """One module (a path from the outermost module) in the operator pass's window."""

    path: str  # "" is the outermost module; "encoder.layer.3.attention.self"
    module_class: str  # its class name ("Linear (compiled)" under torch.compile; "?" when unknown)
    calls: int  # forward calls in the window
    self_cpu_us: float  # operators its own forward ran, and their backward
    total_cpu_us: float  # with its submodules
    total_pct: float  # share of all operator self CPU time
    depth: int  # 0 for a root, one more per enclosing module


@dataclass
class ModuleClassRow:
    """All instances of one module class: "12 BertSelfAttention: 41%"."""

    module_class: str  # the class name
    instances: int  # its module paths in the window
    calls: int  # forward calls in the window, over its instances
    self_cpu_us: float  # summed over its instances
    total_cpu_us: float  # an instance nested in another of its class is counted once
    total_pct: float  # total_cpu_us as a share of all operator self CPU time


@dataclass
class Modules:
    """Where operator time goes by nn.Module (layers/operators/modules.py)."""

    root_class: str | None = None  # the outermost module's class
    rows: list[ModuleRow] = field(default_factory=list)  # depth-first, children by total time
    classes: list[ModuleClassRow] = field(default_factory=list)  # by total time
    outside_cpu_us: float = 0.0  # operators outside any module's forward (optimizer, functional code, glue)
    total_cpu_us: float = 0.0  # all operator self CPU time: the module totals of the roots plus outside_cpu_us
    # caveats: torch.compile'd or scripted regions, modules with time but no forward in the window
    notes: list[str] = field(default_factory=list)


@dataclass
class FoldedStack:
    """One line of stacks.folded: user line; modules, outermost first; operator - weighted by self time."""

    # the user line (or "(no line of yours)"), the modules outermost first ("segment: Class"), the operator
    frames: list[str]
    self_cpu_us: float  # operator self time with this stack in the operator pass's window: the line's weight


@dataclass
class PythonFunction:
    """One function of the call-graph (cProfile) pass; times are instrumented."""

    function: str  # its name as cProfile gives it
    location: str  # "file.py:LINE" of its first line; "~" for built-ins
    kind: str  # user, library, torch (a torch built-in: operator work), wait (a blocking built-in), builtin
    calls: int  # in the pass's window, recursive calls included (cProfile's ncalls)
    self_s: float  # in the function itself
    cumulative_s: float  # with what it calls
    self_pct: float  # share of the pass's total time
    cumulative_pct: float  # likewise, cumulative
    end_line: int | None = None  # user functions and a package's (not torch's): last line, to join operator lines
    # user functions: time it spends itself or in tiny calls (< TINY_CALL_US each) it makes
    # directly, the cost of driving torch one small step at a time from Python
    loop_overhead_s: float | None = None
    tiny_calls: int | None = None  # how many such tiny calls
    operators: list[LineOperator] = field(default_factory=list)  # at its lines, by self time, from the operator pass
    # C built-ins and library code: the user function most of its time was called through ("name at file.py:LINE"
    # of its def), following cProfile's callers; None when no user function is among them
    called_from: str | None = None
    # user functions: large calls (>= TINY_CALL_US each) cProfile saw it make into torch (built-ins, torch's Python
    # layers such as nn.Module.__call__) or a package (s); a package's function (transformers' forward): every call
    # into torch cProfile saw, built-ins and torch's Python layers (s)
    torch_calls_s: float | None = None
    # user functions: self time of the large operators (>= TINY_CALL_US a call) at its lines, in the operator
    # pass's iterations; a package's function: those whose library line is one of its lines; None: none
    operators_all_s: float | None = None
    # operator work cProfile booked in self_s (operator overloads, indexing: C slots it does not see as calls; a
    # scripted module's forward in nn.Module's call frames), moved to python_summary's torch time, and for user
    # functions out of loop_overhead_s; None: none
    hidden_operator_s: float | None = None
    # user functions, where the call-graph pass sampled its own time (python_summary.own_time): the time its own
    # frame spent in C slot operations (a @ b, x + y, x[i], out[i] = v) at its lines; None: not sampled
    slot_s: float | None = None
    # user functions: time in the C functions cProfile saw it call directly, with cProfile's cost on each call
    c_calls_s: float | None = None
    # sampled user functions, at lines where the operator pass recorded no torch operator, with numpy loaded: its
    # own time in C slot operations (`raw @ projection`) and in calls cProfile saw no call for (numpy.random's
    # Cython methods): numpy's work, moved to python_summary's builtin time (the step budget's native slice)
    numpy_s: float | None = None
    numpy_at: str | None = None  # "file.py:LINE" of the line holding most of numpy_s

    @property
    def python_s(self) -> float:
        """Its own time that is Python's: self_s less the operator work cProfile booked there, and less numpy's
        (numpy_s)."""
        return max(0.0, self.self_s - (self.hidden_operator_s or 0.0) - (self.numpy_s or 0.0))

    def moved_noise_s(self, scale: float, rel: float, sample_s: float = 0.0) -> float:
        """The half-width of the interval of its own time left after the operator work moved out of it
        (hidden_operator_s, layers/python.correct_hidden_operators), at relative run-to-run noise `rel`. Where its
        own time was sampled (slot_s), what moved (hidden_operator_s, numpy_s) is a measured part of it, known to
        `rel` of itself and to the sampling error of the samples it holds (`sample_s` each: sqrt(k) of k
        samples). Otherwise what moves is the difference of two passes' measurements, the operator pass's large
        operators at its lines (at the call-graph pass's `scale`, Report.callgraph_scale) less the large calls
        cProfile saw it make, so it is known to `rel` of their sum however small the difference, and at most all
        of its own time is in doubt. examples/numpy_beside_torch.py's <module> before it was sampled (numpy's
        `raw @ projection` runs through a C slot, so its own time is numpy's): 0.80 s of operators less 0.74 s of
        calls seen left 29% of the pass as its Python in one run, 0.78 less 0.40 s left 0.3% in another, and where
        the calls came out larger (0.71 less 0.80 s) nothing moved and 31.5% was left: the comparison is as
        uncertain where it moves nothing. 0 where nothing was compared."""
        if self.slot_s is not None:  # sampled: what moved is a measured part of its own time, not a difference
            moved = (self.hidden_operator_s or 0.0) + (self.numpy_s or 0.0)
            return min(self.self_s, rel * moved + (moved * sample_s) ** 0.5)
        if not self.hidden_operator_s and not self.operators_all_s:
            return 0.0
        terms = (self.operators_all_s or 0.0) * scale + (self.torch_calls_s or 0.0)
        return min(self.self_s, rel * max(self.hidden_operator_s or 0.0, terms))


@dataclass
class ListInput:
    """A TensorList input of an operator (torch.cat's, torch.stack's tensors), as the operator pass's source mode
    saw it at the Python call (layers/operators/recorder.py): the profiler records no shape for such a list."""

    index: int  # its position among the operator's inputs (input_shapes, dtypes)
    tensors: int  # how many tensors the list held at the row's first call
    shapes: list[list[int]]  # the shapes of its first tensors (at most recorder.LIST_SHAPES_MAX) at the first call
    last_tensors: int  # at the row's last call
    last_shapes: list[list[int]]  # at the last call (the same as `shapes` when they never changed)
    calls: int = 0  # the calls seen

    def text(self) -> str:
        """`[[8,64],[8,64]]`; a dimension that changed between the first and the last call as `first..last`
        (a buffer grown by torch.cat each step: `[[0..4864,1024],[256,1024]]`); `,…+N` for tensors not kept."""
        first, last = self.shapes, self.last_shapes
        if len(first) == len(last) and all(len(a) == len(b) for a, b in zip(first, last)):
            dims = [[str(d) if d == e else f"{d}..{e}" for d, e in zip(a, b)] for a, b in zip(first, last)]
        else:  # a list whose length or ranks changed: the last call's
            dims = [[str(d) for d in b] for b in last]
        more = self.last_tensors - len(last)
        text = "[" + ",".join("[" + ",".join(d) + "]" for d in dims) + (f",…+{more}" if more > 0 else "") + "]"
        return text if self.tensors == self.last_tensors else f"{text} ({self.tensors}..{self.last_tensors} tensors)"


@dataclass
class OperatorRow:
    name: str  # aten::addmm
    input_shapes: list[list[Any]]  # per input, [] for a scalar or a non-tensor
    dtypes: list[str]  # per input, the profiler's names ("float", "c10::BFloat16", "Scalar", "")
    calls: int  # in the operator pass's window
    self_cpu_us: float  # excluding the operators it called
    total_cpu_us: float  # including them
    self_pct: float  # share of all operator self CPU time
    source: str | None  # file.py:LINE: the user line with most of its self time, None outside the user's code
    sources: list[SourceShare] = field(default_factory=list)  # every user line that called it, most time first
    flops: int | None = None  # over all calls (torch's flop counter, or layers/efficiency/work.py)
    gflops_per_s: float | None = None  # flops / total CPU time (total_cpu_us)
    cpu_memory_bytes: int = 0  # net bytes the op itself left allocated, over all calls
    # self CPU time by the operator that called this one ("" = called from Python)
    called_by: dict[str, float] = field(default_factory=dict)
    # first call's layout: strides per input, whether each tensor input is contiguous
    # (None for non-tensors), and scalar argument values as the profiler recorded them
    input_strides: list[Any] | None = None
    # per input: its strides are row-major for its shape (None: not a tensor); None: no strides recorded
    contiguous: list[bool | None] | None = None
    # per input: the value recorded for a scalar argument (None for a tensor); None: none recorded
    concrete_inputs: list[Any] | None = None
    # per call, from the shapes (layers/efficiency/work.py): flops, bytes moved, how each was counted
    work: Work | None = None
    bytes: int | None = None  # bytes moved over all calls (inputs read + outputs written once: a lower bound)
    # where it ran: the module whose forward called it (the largest share) and the library line that did
    module: str | None = None
    module_class: str | None = None  # that module's class name
    # the innermost frame outside torch there: a library's line, or the user's in their own model
    library_line: str | None = None
    modules: list[ModuleShare] = field(default_factory=list)  # by self time, largest first
    min_self_us: float | None = None  # per call
    max_self_us: float | None = None  # per call: the slowest call's self time
    # its TensorList inputs (torch.cat's tensors), whose shapes the profiler does not record (input_shapes holds
    # [] there): as the operator pass's source mode saw them; empty when it has none or they were not seen
    list_inputs: list[ListInput] = field(default_factory=list)
    # where its calls ran: process role and Python thread, by self time, largest first (every role's processes summed)
    processes: list[ProcessShare] = field(default_factory=list)

    def in_main_process(self) -> tuple[float, int]:
        """(self CPU µs, calls) of its calls in the target's own process, any thread: what its steps hold (the
        processes it forked run beside them); the whole row in a report from before `processes`."""
        if not self.processes:
            return self.self_cpu_us, self.calls
        main = [s for s in self.processes if s.role == "main"]
        return sum(s.self_cpu_us for s in main), sum(s.calls for s in main)

    def where_module(self) -> str | None:
        """The module that ran it, `encoder.layer.*.intermediate.dense (Linear)`: its instances' differing
        indices as `*`; None when it ran outside every module."""
        shares = [s for s in self.modules if s.module is not None]
        if not shares:
            return None
        top = shares[0]
        parts = (top.module or "").split(".")
        same = [s for s in shares if s.module_class == top.module_class
                and len((s.module or "").split(".")) == len(parts)]
        for s in same[1:]:
            for i, (a, b) in enumerate(zip(parts, (s.module or "").split("."))):
                if a != b:
                    parts[i] = "*"
        if not top.module:  # the outermost module itself: its class says it
            return (top.module_class or "the outermost module") + (
                f" +{len(shares) - 1} other" if len(shares) > 1 else "")
        path = ".".join(parts)
        cls = f" ({top.module_class})" if top.module_class else ""
        return f"{path}{cls}" + (f" +{len(shares) - len(same)} other" if len(shares) > len(same) else "")

    def shapes_shown(self) -> list[Any]:
        """input_shapes as a person reads them: each TensorList input (recorded as []) replaced by its tensors'
        shapes (ListInput.text), or by "[tensors]" when they were not seen, never dropped as a scalar."""
        lists = {li.index: li for li in self.list_inputs}
        return [lists[i].text() if i in lists else "[tensors]" if d == "TensorList" else s
                for i, (s, d) in enumerate(zip(self.input_shapes, [*self.dtypes, *[""] * len(self.input_shapes)]))]

    def library_elsewhere(self) -> str | None:
        """The library line that ran most of it, when it is not one of its own user lines (two user functions
        making the same call, examples/contiguous_copies.py's two `.contiguous()` at :15 and :19, are its sources,
        and which of them ran most differs from run to run: never a library line of the other's)."""
        own = {self.source, *(s.location for s in self.sources)}
        return self.library_line if self.library_line and self.library_line not in own else None


# a finding's doubt when the machine's peaks (the roofs it is judged against) were measured under load
PEAKS_CONTENDED_DOUBT = "the machine's peaks were measured while other processes held CPUs"


@dataclass
class BudgetItem:
    """One contributor to a step-budget slice: a kernel at its shapes, a Python function, a library."""

    label: str  # "aten::mm [256,1024], [1024,1024]", a function's name, "numpy"
    s: float  # seconds of it per step (or call)
    share: float = 0.0  # of the step
    op: str | None = None  # the operator, for a kernel
    module: str | None = None  # the module path it ran in, inside a library model
    location: str | None = None  # the user's file.py:LINE


@dataclass
class BudgetSlice:
    """Where part of a step goes (diagnose/budget.py): kernels, dispatch, python, native, data, allocator, waiting,
    or unexplained (the rest, always shown, negative when the slices overlap)."""

    name: str
    s: float  # seconds per step (or call)
    basis: str  # how it was measured
    items: list[BudgetItem] = field(default_factory=list)  # its top contributors, largest first
    share: float = 0.0  # of the step (0-1)
    # half-width of its interval, as a share of the step, where it is a difference of larger measured and
    # estimated terms (python: cProfile's self time less the operators and frees moved out of it, each known to
    # the run-to-run noise); None: the run's noise on the share itself
    noise_share: float | None = None


@dataclass
class StepBudget:
    """A top-down account of one step: measured slices that add up to the uninstrumented median step, and what
    they leave unexplained (diagnose/budget.py). A finding's time at stake never exceeds the slice it is about."""

    unit: str  # "step", "call" (function mode) or "run" (a script without steps, or --full-run: the whole run)
    step_s: float  # the uninstrumented pass's median step (the unit's time): the budget's 100%
    slices: list[BudgetSlice] = field(default_factory=list)  # in a fixed order, unexplained last
    unexplained_share: float = 0.0  # the unexplained slice's share (negative: the slices over-count)
    costs: str = ""  # where the per-call costs came from (this machine's probe, or defaults: budget.DEFAULT_COSTS)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Stake:
    """What fixing a finding could win and how far to believe it (diagnose/findings/stake.py). Ranking and
    severity go by pct x confidence (`expected_pct`, derived, not written)."""

    # share of the run's uninstrumented wall time a fix could win, in percent; None: not estimated (basis says why)
    pct: float | None
    # how pct was estimated ("unknown": no estimate); "<kind>: <its basis>" when a merged finding took a piece's stake
    basis: str
    upper_bound: bool = False  # pct is a ceiling (cProfile's inflated Python, perfect scaling): confidence halves
    # share of pct to believe, 0-1: 1.0, halved for an upper bound and for a doubted measurement; None: not settled
    confidence: float | None = None
    confidence_why: list[str] = field(default_factory=list)  # why confidence is below 1
    # pct's interval from this run's noise (report/borderline.py), which severity is judged against; None: a
    # point estimate
    low: float | None = None
    high: float | None = None
    # severity judged on pct itself between medium and high, the interval shown beside it (findings/stake.settle:
    # medium only when low clears its 5% line): a trial's median of nine rounds, which moves less from run to run
    # than its interval's ends, two of those rounds
    on_point: bool = False

    @property
    def expected_pct(self) -> float | None:
        """pct x confidence: the share ranking and severity go by (None without both)."""
        return self.pct * self.confidence if self.pct is not None and self.confidence is not None else None


@dataclass
class Borderline:
    """A finding whose measured number straddles one of its severity's thresholds within this run's noise
    (diagnose/report/borderline.py): it takes the milder severity, the same in every run, and says what the
    other end of the interval would make it; a stake judged on its point (Stake.on_point: a trial's median of
    nine rounds) takes the point's, and says what the end across the line would make it."""

    measure: str  # what was compared: "share of operator CPU time", "% of this machine's roof", ...
    value: float  # as measured
    low: float  # the interval from this run's noise
    high: float
    threshold: float  # the line inside the interval
    unit: str  # "%", "GiB/s"
    would_be: str  # the severity at the interval's other end (the worse one, unless the stake is judged on its point)


@dataclass(frozen=True)
class Place:
    """Where an operator finding ran beyond the user's line (diagnose/findings/place.py)."""

    # the module whose forward ran it, instances' differing indices as `*`, with its class:
    # "encoder.layer.*.intermediate.dense (Linear)"; None: outside every module
    module: str | None
    module_class: str | None  # that module's class name
    # the innermost frame outside torch that ran it (a library's line), None when that is the user's line itself;
    # inside a library model it tells apart findings at the user's one line that calls the model
    library_line: str | None


@dataclass
class Finding:
    """One diagnosis (diagnose/findings/): `evidence` holds what its rule measured; the typed fields after `layer`
    what it is ranked, placed and merged by (diagnose/findings/stake.py)."""

    kind: str  # one of the finding kinds of docs/report.md
    severity: str  # high, medium, low
    title: str  # one sentence, read first
    op: str | None  # the operator concerned, or None
    location: str | None  # file.py:LINE in the user's code, or None
    evidence: dict[str, Any]  # the measured numbers that crossed the rule's thresholds, named with their units
    suggestion: str  # what to try, concretely
    layer: str = ""  # the layer whose measurements raised it
    # what fixing it could win, with its confidence (findings/stake.py); None: not estimated (a finding made
    # outside findings.derive)
    stake: Stake | None = None
    # True: it says where the time goes rather than what to fix (a healthy GEMM's hot_operator), ranked last and
    # never raised to medium by its stake; False: its rule judged it actionable; None: its rule does not judge that
    observation: bool | None = None
    # why the measurement behind it may be wrong (noisy, contended, disturbed); any doubt halves its confidence
    doubts: list[str] = field(default_factory=list)
    place: Place | None = None  # its module and library line (operator findings; None: not known)
    # the severity its rule gave, when the stake changed it (findings/stake.py settle); None: unchanged
    rule_severity: str | None = None
    severity_basis: str | None = None  # why the stake changed it; None: unchanged
    severity_from: str | None = None  # a merged finding's severity came from this piece: "hot_operator (operators)"
    # its number straddles a severity threshold within this run's noise: the milder severity was taken
    borderline: Borderline | None = None
    # the other findings at the same line (and library line), merged into this one: each as its rule raised
    # and settled it, at this location, with no `also` of its own; and a finding without a line whose time this one
    # holds (memory_churn: the doctor's page_faults), at its own location (none)
    also: list[Finding] = field(default_factory=list)


@dataclass
class NotConfirmed:
    """A result the tool doubts itself (findings/verdict.py): a finding whose measurement may be wrong (its
    `doubts`), listed below the findings and never ranked among them, with the command that re-measures it."""

    finding: Finding  # as its rule raised and settled it; its `doubts` say why it is not confirmed
    # the command that re-measures it (a reproducer script runs from the report's folder); None: not recorded
    # (a report of schema "3" without a reproducer for it)
    reproduce: str | None


@dataclass
class KernelAtRoof:
    """One of the step's top kernels against this machine's roofs (its efficiency layer roofline row)."""

    op: str  # aten::mm
    input_shapes: list[list[Any]]
    share_pct: float  # of operator self CPU time (the roofline row's)
    efficiency_pct: float  # achieved rate as a share of the roof at its arithmetic intensity
    bound: str | None  # "compute" or "memory"


@dataclass
class Verdict:
    """The report's answer in one sentence, and the numbers it rests on (findings/verdict.py). Healthy: the
    step budget's kernels take most of the step, its top kernels run near this machine's roofs, and no
    finding is medium or higher."""

    healthy: bool
    text: str  # the sentence the renderers print first, after the step budget
    kernels_share: float | None  # the step budget's kernels slice (0-1); None: no budget or no operator pass
    kernels: list[KernelAtRoof] = field(default_factory=list)  # the top kernels with an efficiency, largest first
    findings_above_low: int = 0  # confirmed findings of severity medium or high
    unmet: list[str] = field(default_factory=list)  # what a healthy verdict needs and this run lacks, in words


@dataclass
class RecordingLine:
    """One user line whose torch calls built an autograd graph in the operator pass's window."""

    source: str | None  # the user's line (file.py:LINE), None outside the user's code
    calls: int  # its calls made with grad mode on and an input that requires grad


@dataclass
class Autograd:
    """Whether the window built autograd graphs, and whether any backward used them (operator pass)."""

    calls: int  # torch calls recorded in the window (the source mode's count)
    recording_calls: int  # of them: grad mode on and a tensor input requiring grad, so a graph node was made
    backward_ops: int  # profiler rows of backward work in the window (names with "Backward", autograd engine)
    grad_mode_off_calls: int = 0  # calls made under torch.no_grad() / inference_mode()
    # of `calls`: reached through a C slot of the tensor's type (`a - b`, `x[i]`, `out[i] = v`): cProfile sees no
    # call there, so their dispatch is in the calling function's Python self time (the step budget takes it out)
    slot_calls: int = 0
    lines: list[RecordingLine] = field(default_factory=list)  # the recording calls per user line, most first


@dataclass
class OutputCheck:
    """A what-if variant's outputs against the baseline's, same seed, same inputs (diagnose/whatif/outputs.py)."""

    status: str  # "match", "differ", "unchecked" (then `reason` says why)
    compared: str | None = None  # what was compared: "BertModel output at its call 2: 2 tensors, 270336 values"
    max_abs_diff: float | None = None  # max |variant - baseline| over the compared values; None when not compared
    rel_diff: float | None = None  # max |variant - baseline| / max |baseline|
    tolerance: float | None = None  # the largest rel_diff that still matches, for this variant
    reason: str | None = None  # why unchecked, or why the outputs could not be compared ("differ")


@dataclass
class GraphBreakAt:
    """A graph break torch._dynamo logged while compiling (its `graph_breaks` log artifact)."""

    reason: str  # torch._dynamo's reason, its first line that is not a preface (at most 300 characters)
    source: str | None  # where in the traced code: file.py:LINE (the user's code or a library's)
    count: int = 1  # times this place and reason were logged
    skipped: bool = False  # dynamo gave up on the whole function there (a break inside a loop): it runs eagerly


@dataclass
class CompileCost:
    """What torch.compile cost in the what-if passes (compile variant only)."""

    # one-off cost: torch.compile() and the first compiled call, less a compiled step; the slowest round (coldest
    # caches); None: no round timed its first compiled call
    compile_s: float | None = None
    compile_s_warm: float | None = None  # the fastest round (inductor's on-disk cache warm)
    break_even_steps: int | None = None  # compile_s / (baseline step - compiled step); None: never repays
    graphs: int = 0  # unique graphs torch._dynamo compiled, first round
    # the first round's graph breaks, one per place and reason
    graph_breaks: list[GraphBreakAt] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)  # the first round's recompiles, with the failed guards


@dataclass
class WhatIfVariant:
    """One code change measured on the user's own steps (diagnose/whatif/): the A/B, the outputs, its cost."""

    name: str  # "inference_mode", "channels_last", "bf16", "float32", "compile", "flush_denormal"
    why: str  # why it ran: what in the report made it apply, or "asked for (--what-if)"
    trial: Trial  # the interleaved A/B rounds (diagnose/doctor/trials.py): speedup, 95% interval, verdict
    outputs: OutputCheck  # its outputs against the unchanged run's, first round
    recommended: bool = False  # a win outside the noise and outputs that match
    compile: CompileCost | None = None  # the compile variant's one-off cost; None for the others


@dataclass
class WhatIfSkipped:
    name: str  # the variant
    reason: str  # why it did not run


@dataclass
class WhatIf:
    """--what-if: code changes applied from outside to the outermost nn.Module, each measured against the
    unchanged run in interleaved rounds (diagnose/whatif/)."""

    requested: list[str] = field(default_factory=list)  # as given: names, or ["auto"]
    # the variants run, in a fixed order (inference_mode, channels_last, bf16, float32, compile, flush_denormal)
    variants: list[WhatIfVariant] = field(default_factory=list)
    skipped: list[WhatIfSkipped] = field(default_factory=list)  # asked for or considered, not run, and why
    estimate_s: float | None = None  # the cost announced before it started
    elapsed_s: float | None = None  # wall time of all the rounds
    notes: list[str] = field(default_factory=list)  # how the runs were made comparable, and why outputs went unchecked


# ---- microbenchmarks: the microbench layer's rows (diagnose/layers/microbench.py)

# A non-tensor argument's value as microbench assumed it: a number, a flag, a string (a dtype as its code,
# "torch.float32"), a list of ints (stride, padding, dim), or None
AssumedArg = bool | int | float | str | list[int] | None


@dataclass(kw_only=True)  # keyword-only: the fields keep the order of microbench's own rows in report.json
class MicrobenchRow:
    """One operator measured alone at its recorded shapes, at one thread count: a row of the `microbench`
    package's results file (microbench/results.py Row, its `measurements`), taken over unchanged but for
    `reproducer`, which the layer makes relative to the report's folder. Times are per call. Required are
    the fields microbench's own reader requires; the defaults are its reader's."""

    op: str  # "aten::mm"
    overload: str = ""  # "default"
    input_shapes: list[list[int]]  # as in the operator row ([] = a scalar; TensorList inputs are never measured)
    dtypes: list[str] = field(default_factory=list)  # the profiler's names, aligned with input_shapes
    # one flag for the case: every tensor input contiguous (unlike OperatorRow.contiguous, which is per input)
    contiguous: bool = True
    strides: list[list[int] | None] | None = None  # per tensor input (None: that one contiguous); None: all are
    layout: str = ""  # how the inputs were laid out and whether that was recorded or assumed
    threads: int  # intra-op threads of this measurement (under diagnose: 1, the run's intra-op count, the usable CPUs)
    median_us: float  # median per-call time over the measured blocks
    iqr_us: float  # interquartile range of the blocks' per-call times
    runs: int = 0  # measured blocks
    number_per_run: int = 0  # calls per block
    noise_pct: float | None = None  # IQR / median * 100 (microbench always writes it)
    noisy: bool = False  # noise_pct >= 10
    flops: int | None = None  # per call; None: unknown work
    gflops_per_s: float | None = None  # flops / median_us; None: unknown work
    bytes: int | None = None  # inputs + outputs once: a lower bound on memory traffic
    gbytes_per_s: float | None = None  # bytes / median_us, GB/s; None: unknown bytes
    speedup_vs_1_thread: float | None = None  # median at 1 thread / median here; None without a 1-thread row
    parallel_efficiency: float | None = None  # speedup / threads
    # a perfectly parallel reference (torch.sin, split evenly) measured interleaved with it: its median at 1 thread /
    # here, what the CPUs gave parallel work meanwhile; None at 1 thread (microbench/measure.py)
    reference_speedup: float | None = None
    others_cpus: float | None = None  # CPUs other processes used meanwhile (/proc/stat, steal included)
    contended: bool = False  # others took CPUs these threads needed: the time measures the machine
    source: str | None = None  # from the operator row: the user's line
    self_pct: float | None = None  # the operator row's share of operator time
    reproducer: str | None = None  # "reproducers/01_sort_4000000.py", relative to the report's folder
    assumed_args: dict[str, AssumedArg] = field(default_factory=dict)  # values the report did not record
    stmt: str = ""  # the timed call: "torch.ops.aten.mm.default(x0, x1)"
    instructions_per_call: int | None = None  # microbench --callgrind only (never under diagnose)
    # calls callgrind counted for instructions_per_call (microbench --callgrind only)
    callgrind_number: int | None = None
    times_us: list[float] = field(default_factory=list)  # per-call time of every measured block
    # per-call median of each interleaved turn (microbench/measure.py), in turn order: the i-th turns of one case's
    # thread counts ran side by side in one round, so their ratios pair (findings/microbench.py speedup_noise)
    turns_us: list[float] = field(default_factory=list)


# ---- operator and Python summaries: operator_summary, python_summary, OperatorRow.work,
# PythonFunction.operators


@dataclass
class Work:
    """Per call of one operator, from its recorded shapes (layers/efficiency/work.py), rebuilt on the meta device."""

    flops: int | None = None  # None: no FLOP count (no formula for the operator, or the call could not be rebuilt)
    flops_source: str | None = None  # how they were counted: "flop_counter", "pointwise estimate: ...", ...
    bytes: int | None = None  # inputs read once + outputs written once (compulsory traffic, a lower bound)
    bytes_source: str | None = None  # how the bytes were counted (inputs read once + outputs written once)
    # each output tensor's shape, from the call rebuilt on the meta device; None: it could not be rebuilt or run
    output_shapes: list[list[int]] | None = None
    contiguous: bool | None = None  # every tensor input has its row-major strides
    reason: str | None = None  # why flops or bytes are missing


@dataclass
class OperatorMemory:
    """CPU allocations the profiler recorded in the operator pass's window."""

    allocations: int = 0  # CPU allocation records in the window (the profiler's profile_memory)
    allocated_bytes: int = 0  # bytes those allocations took, summed
    freed_bytes: int = 0  # bytes freed in the window, summed
    # most bytes allocated in the window and alive at once (memory held from before it is not seen)
    peak_live_bytes: int = 0
    # of freed_bytes, those freed while an operator ran (the rest: between operators, a Python decref dropping a
    # tensor's last reference); None: not recorded (older reports)
    freed_in_operators_bytes: int | None = None


@dataclass
class TraceSummary:
    """What trace.json holds of the window (capped at --trace-max-events)."""

    events_written: int = 0  # operator and user-line spans written to trace.json (at most --trace-max-events per rank)
    events_total: int = 0  # such spans in the window
    truncated: bool = False  # events_total > events_written: the trace holds only the window's beginning
    span_s: float = 0.0  # from the first written event's start to the last's


@dataclass
class OperatorSummary:
    """Totals of the operator pass (layers/operators/)."""

    total_self_cpu_us: float = 0.0  # all operator rows, before MAX_ROWS kept the largest
    attributed_share: float | None = None  # of total_self_cpu_us, the part with a user line (0-1)
    attribution_overhead_us: float = 0.0  # self time of diagnose's user-line label spans (not operator time)
    # the target's own process: operators a scripted or traced module's C++ forward ran, below no torch call from
    # Python (cProfile books their time to the nn.Module call frames that called it: layers/python.py moves it)
    below_python_us: float = 0.0
    events: int = 0  # profiler events in the window
    # CPU allocations in the window; under torchrun summed over ranks (peak_live_bytes: the largest)
    memory: OperatorMemory = field(default_factory=OperatorMemory)
    window: str | None = None  # which iterations were recorded, when not all of them
    trace: TraceSummary | None = None  # what trace.json holds of the window; None when the pass gave no trace summary
    ranks: list[int] = field(default_factory=list)  # torchrun: the ranks whose rows are merged (else empty)
    # the user lines where float64 tensors came from (operator pass, the whole run; the dtype finding's cause)
    float64_origins: list[Float64Origin] = field(default_factory=list)
    # the user lines where torch.autocast was entered (operator pass, the whole run; where its casts' fix goes)
    autocast_entries: list[AutocastEntry] = field(default_factory=list)
    # the call sites whose input bytes or time grew step over step in the window (input_growth, step_drift)
    trends: list[SiteTrend] = field(default_factory=list)
    children: list[ChildProcess] = field(default_factory=list)  # processes the target forked whose rows are merged
    # Python processes the target started from a fresh interpreter (spawn, forkserver, subprocess): not recorded
    not_recorded: list[StartedProcess] = field(default_factory=list)


@dataclass
class AutocastEntry:
    """A user line where the target entered torch.autocast (layers/operators/recorder.py AutocastEntries)."""

    source: str | None  # the user line (file.py:LINE) of the `with torch.autocast(...)`; None outside the user's code
    device: str  # "cpu"
    dtype: str  # the autocast dtype: "bfloat16", "float16"
    entries: int  # how many times it was entered in the run
    # of those, entered under torch.inference_mode, where autocast does not cache its weight casts (it casts every
    # weight again on every call; under torch.no_grad once per autocast region: findings/suggestions.py)
    inference_mode: int = 0


@dataclass
class Float64Origin:
    """A call that made float64 tensors from something that was not float64 (layers/operators/recorder.py): a
    `.double()` or `.to(torch.float64)`, `torch.from_numpy` / `torch.tensor` of a float64 numpy array, a
    `dtype=torch.float64` argument, a factory under `torch.set_default_dtype(torch.float64)`, or that call itself."""

    source: str | None  # the user line (file.py:LINE); None outside the user's code
    how: str  # what made float64 there, in the user's words: ".double()", "torch.from_numpy of a float64 array"
    calls: int  # how many such calls (a model's .double() converts each parameter: one call each)
    bytes: int  # the float64 bytes they made
    parameters: int = 0  # of those calls, conversions of an nn.Parameter (a model cast to float64)


@dataclass
class ChildProcess:
    """A process the target forked, recorded by the operator pass from its start to its end."""

    pid: int
    role: str  # pool worker, DataLoader worker, process, forked child (ProcessShare.role)
    name: str | None  # multiprocessing's name for it ("ForkPoolWorker-3"); None: os.fork()
    ended: str  # os._exit, SIGTERM, exit
    self_cpu_us: float  # its operators' self time
    error: str | None = None  # its recording failed: why


@dataclass
class StartedProcess:
    """A Python process the target started from a fresh interpreter, which the operator pass does not record."""

    how: str  # spawn, forkserver (multiprocessing's start methods), subprocess
    command: str  # its command line, shortened
    pid: int | None = None


@dataclass
class OwnLine:
    """One line of the user's code, by what its own frame was executing when the call-graph pass sampled the
    main thread (layers/python.py OwnTimeSampler); seconds of that pass."""

    location: str  # "file.py:LINE"
    function: str  # the function whose frame ran it, as cProfile names it ("<module>" at module scope)
    defined_at: str  # "file.py:LINE" of that function's first line (its python_hotspots row's location)
    python_s: float  # its own bytecode
    slot_s: float  # a C slot operation (a @ b, x + y, x[i], out[i] = v): work cProfile sees no call for
    call_s: float = 0.0  # a call it makes (in the callee, which cProfile books to the callee when it sees the call)


@dataclass
class OwnTime:
    """Where the user's functions spend their own time, sampled beside cProfile in the call-graph pass
    (layers/python.py OwnTimeSampler): cProfile's self time cannot tell a line's Python from the C slot
    operations it runs, which is torch's operator work or numpy's."""

    period_s: float  # the sampling period asked
    samples: int  # samples of the main thread taken
    sampled_s: float  # the time they stand for (each the time since the one before, capped at a few periods)
    numpy_loaded: bool  # numpy was imported when the pass ended
    lines: list[OwnLine] = field(default_factory=list)  # by own time, largest first (layers/python.OWN_LINES_MAX)

    @property
    def sample_s(self) -> float:
        """The time one sample stands for, on average."""
        return self.sampled_s / self.samples if self.samples else 0.0


@dataclass
class LineOperator:
    """An operator (name, shapes) called from one line of a user function, per the operator pass."""

    op: str  # the operator (aten::addmm)
    input_shapes: list[list[Any]]  # per input, as in the operator row
    location: str  # "file.py:LINE"
    calls: int  # calls from this line in the operator pass's window
    self_cpu_us: float  # their self CPU time in the operator pass


@dataclass
class PythonSplit:
    """The call-graph pass's self time by kind of function (PythonFunction.kind), seconds."""

    torch: float = 0.0  # torch built-ins, and operator work cProfile booked to Python lines (hidden_operator_s)
    user: float = 0.0  # the user's functions, less the operator work moved to `torch`
    library: float = 0.0  # other Python code: torch's Python layers, packages, the standard library (packages' less
    # the operator work moved to `torch`)
    builtin: float = 0.0  # other C built-ins
    wait: float = 0.0  # built-ins that block: sleep, locks, pipe and socket reads, select/poll, waiting for a child


@dataclass
class CallgraphSettings:
    """How callgraph.dot was drawn (gprof2dot's options)."""

    node_thres_pct: float  # gprof2dot -n: functions under this share of the total time are left out
    edge_thres_pct: float  # gprof2dot -e: calls under this share of the total time are left out
    focus: str  # "all", or "user": the user's files only
    root: str | None = None  # gprof2dot's name of the node the graph starts from


@dataclass
class PythonSummary:
    """The call-graph (cProfile) pass's split of time (layers/python.py)."""

    total_s: float = 0.0  # self time of every function: the pass's time under cProfile
    functions: int = 0  # distinct functions cProfile recorded (all of them, not only python_hotspots' rows)
    calls: int = 0  # function calls cProfile counted
    split_s: PythonSplit = field(default_factory=PythonSplit)  # self time by kind of function
    operator_share: float = 0.0  # split_s.torch / total_s
    python_share: float = 0.0  # everything but operators and waiting, over total_s
    # how much slower this pass ran its operators than the operator pass, beyond cProfile's per-call cost
    # (>= 1): the operator-pass times moved into split_s.torch were scaled by it
    operator_pace: float | None = None
    # operator work moved from user and package functions' self time (and nn.Module call frames', for a scripted
    # module's forward) to split_s.torch
    hidden_operator_s: float | None = None
    # numpy's work moved from user functions' self time to split_s.builtin (PythonFunction.numpy_s)
    numpy_s: float | None = None
    own_time: OwnTime | None = None  # the user functions' own time, sampled by line; None: not sampled
    wall_s: float | None = None  # this pass's wall time over the measured span
    # its steps (or calls) over that span: their median is the pass's typical step (budget.of's pace); None: not
    # recorded (reports before 2026-12-05, or a run without steps)
    steps: IterationStats | None = None
    # its process's minor page faults over that span: a second sample of the workload's heap, without an
    # allocating profiler (doctor/workload.call_graph_faults); None: not read
    minor_faults: int | None = None
    overhead_ratio: float | None = None  # wall_s / the uninstrumented run.wall_s
    callgraph: CallgraphSettings | None = None  # how callgraph.dot was drawn


# ---------------------------------------------------------------- efficiency (diagnose/layers/efficiency/)


@dataclass
class ProbeKey:
    """What a probe result stands for (probe.machine_key): a cached result is used only for the same key."""

    cpu_model: str  # /proc/cpuinfo's model name
    usable_cpus: int  # usable CPUs (affinity and cgroup quota) when the probe ran
    torch_version: str  # torch.__version__ the probe ran with
    isa: str = ""  # vector instruction sets (a VM's "AMD EPYC" can be an AVX2 or an AVX-512 host); "": not recorded
    mode: str | None = None  # "full" or "quick"; None in results written before the mode was part of the key


@dataclass
class GemmPeak:
    """torch.mm on square fp32 matrices at one thread count: the median call after a warm-up."""

    threads: int  # torch.set_num_threads for this row
    gflops_per_s: float  # 2 n^3 / median_s
    n: int | None = None  # matrix size (n x n)
    calls: int | None = None  # timed calls
    median_s: float | None = None  # the median timed call
    iqr_pct: float | None = None  # IQR of the calls over the median
    others_cpus: float | None = None  # CPUs other processes used meanwhile (/proc/stat), None where unreadable
    contended: bool = False  # they took CPUs our threads needed: the number is low


@dataclass
class MemoryPeak:
    """STREAM-style copy and triad on fp32 arrays larger than the last-level cache, at one thread count."""

    threads: int  # torch.set_num_threads for this row
    gb_per_s: float  # the better of copy and triad: the memory roof
    array_mib: int | None = None  # each array's size
    copy_gb_per_s: float | None = None  # STREAM copy (b.copy_(a)): 2 x the array's bytes / the median call
    triad_gb_per_s: float | None = None  # STREAM triad (a = b + 3 c): 3 x the array's bytes / the median call
    iqr_pct: float | None = None  # the noisier of the two
    others_cpus: float | None = None  # CPUs other processes used meanwhile (/proc/stat), None where unreadable
    contended: bool = False  # they took CPUs our threads needed: the number is low


@dataclass
class PageCost:
    """What a fresh 4 KiB page costs the allocator on this machine, at one thread count (the probe): faulted in on
    its first write, and given back to the kernel when its block is freed (glibc munmaps blocks over 32 MiB)."""

    threads: int  # torch.set_num_threads while the page was first written
    fault_us: float  # wall time a page adds to a write that faults it in (fresh block less a warm one, per page)
    free_us: float  # wall time freeing a written block takes, per page (the decref that drops its last reference)


@dataclass
class CallCosts:
    """What one call costs on this machine, beyond any work (the probe, diagnose/layers/efficiency/probe.py): the
    step budget's per-call slices (diagnose/budget.py). Medians of tight loops at one thread; `pages` at 1 and at
    the usable CPUs."""

    dispatch_us: float  # a tiny operator called from Python (torch.add on one-element tensors, grad off)
    autograd_dispatch_us: float  # the same call recording autograd (an input that requires grad, grad on)
    profiler_self_us: float  # that tiny operator's self time as the operator pass records it (its fixed part)
    cprofile_call_us: float  # what cProfile adds to one Python function call (the python pass's per-call cost)
    method: str = ""  # how, in words
    # wall time the operator pass's recorder adds to that call (with it less without): most of it outside the
    # operator's self time, between operators; None in caches before format 3
    profiler_call_us: float | None = None
    pages: list[PageCost] = field(default_factory=list)  # per thread count; empty in caches before format 3
    measure_s: float | None = None  # what measuring all of this took (torch's import not counted)

    def page(self, threads: int | None) -> PageCost | None:
        """The page cost measured at the most threads <= `threads` (the fewest measured, when all are more)."""
        if not self.pages:
            return None
        fit = [p for p in self.pages if p.threads <= max(threads or 1, 1)]
        return max(fit, key=lambda p: p.threads) if fit else min(self.pages, key=lambda p: p.threads)


@dataclass
class SpreadGroup:
    """One number of the probe's process-spread step (probe.SPREAD_GROUPS) over its processes."""

    name: str  # "gemm share", "pointwise share", "copy share" (of the step) or "gemm call" (its mean, µs)
    what: str  # the operator it is of, in words
    low: float  # the least any process measured
    high: float  # the most any process measured
    spread_pct: float  # the 95% half-width of one process's value, as a ratio less 1, in %: exp(1.96 sd(logs)) - 1


@dataclass
class ProcessSpread:
    """How far one process's measurement of the same work lands from another's on this machine (the probe,
    diagnose/layers/efficiency/probe.py measure_process_spread; or the machine's history of such timings, one a
    diagnosis, probe.history_spread): the floor of the interval a window aggregate (an operator's share, a mean
    call) is judged on, where it is wider than report/borderline.RUN_NOISE_MIN."""

    processes: int  # processes that timed the same step: the probe's forks one after another, or the history's
    threads: int  # torch's intra-op threads in each (its default)
    window_s: float  # each one's timed window
    groups: list[SpreadGroup] = field(default_factory=list)
    spread_pct: float = 0.0  # the largest of the groups' spreads
    contended: bool = False  # other processes took CPUs meanwhile: not used as a floor
    measure_s: float | None = None  # what measuring it took
    method: str = ""  # how, in words
    span_h: float | None = None  # the history's: hours from its first sample used to its last; None: one probe's


@dataclass
class Peaks:
    """This machine's measured peaks (diagnose/layers/efficiency/probe.py): the probe's result as it caches it
    (a JSON file per machine key), plus whether this report took it from that cache."""

    key: ProbeKey | None = None  # the machine and torch it stands for
    gemm_fp32: list[GemmPeak] = field(default_factory=list)  # one row per thread count probed (1 and the usable CPUs)
    memory: list[MemoryPeak] = field(default_factory=list)  # one row per thread count probed (1 and the usable CPUs)
    format: int | None = None  # the cache file's format (probe.CACHE_FORMAT)
    measured_at: str | None = None  # ISO time of the measurement
    mode: str | None = None  # "full" or "quick"
    llc_bytes: int | None = None  # last-level cache size (sysfs)
    loadavg_1m: float | None = None  # when the probe ran
    contended: bool = False  # other processes took CPUs during the probe: the roofs are low
    probe_s: float | None = None  # what the probe took
    method: str | None = None  # how it measured, in words
    cached: bool = False  # this report read it from the cache instead of measuring
    cache_path: str | None = None  # the cache file (None: not cached, e.g. a contended probe)
    call_costs: CallCosts | None = None  # per-call costs (cache format 2 on); None in older files
    process_spread: ProcessSpread | None = None  # cache format 5 on; None in older files or where not measured
    # the machine's spread history (not cached with the peaks: its own file, one sample a diagnosis), once it holds
    # probe.HISTORY_MIN uncontended samples at the run's threads: then the floor instead of process_spread
    spread_history: ProcessSpread | None = None
    spread_samples: int | None = None  # the history's uncontended samples at the run's threads; None: not sampled

    def gemm_peak(self, threads: int) -> float | None:
        """Best GEMM GFLOP/s measured at <= threads (a run with more threads can do at least that)."""
        vals = [g.gflops_per_s for g in self.gemm_fp32 if g.threads <= max(threads, 1)]
        return max(vals) if vals else None

    def bandwidth_peak(self, threads: int) -> float | None:
        """Best memory GB/s measured at <= threads."""
        vals = [m.gb_per_s for m in self.memory if m.threads <= max(threads, 1)]
        return max(vals) if vals else None


@dataclass
class Roofs:
    """The peaks at the run's intra-op threads (capped at the usable CPUs): the best measured at <= them."""

    threads: int  # the run's intra-op threads (else the usable CPUs), capped at the usable CPUs, at least 1
    gflops_per_s: float | None  # compute roof: fp32 GEMM
    gb_per_s: float | None  # memory roof: copy/triad
    ridge_flop_per_byte: float | None  # their ratio: at or right of it an operator is compute-bound
    llc_bytes: int | None = None  # last-level cache: a memory-bound row whose bytes fit may beat the DRAM roof
    # the probe's GEMM peak when a kernel of the run was measured faster (roofline.fastest_kernel); None: not raised
    probed_gflops_per_s: float | None = None
    # that kernel: "aten::mm [256, 1024]x[1024, 1024] micro-benchmarked alone at 2 threads"
    raised_by: str | None = None


@dataclass
class RooflineRow:
    """One hot operator row placed on the roofline (roofline.place). Times are the operator pass's self CPU
    time, so rates carry its instrumentation overhead; flops and bytes are per call."""

    name: str  # the operator row's name (aten::mm)
    input_shapes: list[list[Any]]  # the operator row's
    dtypes: list[str]  # the operator row's
    source: str | None = None  # the user's line (file.py:LINE)
    share_pct: float = 0.0  # of operator self CPU time
    calls: int = 0  # the operator row's, in the operator pass's window
    self_cpu_us: float = 0.0  # the operator row's, over all its calls
    us_per_call: float | None = None  # self_cpu_us / calls
    threads: int | None = None  # the roofs' threads
    flops: int | None = None  # per call (layers/efficiency/work.py)
    flops_source: str | None = None  # how they were counted ("flop_counter", ...)
    bytes: int | None = None  # per call: inputs read and outputs written once (a lower bound)
    # per call, from the work estimate; None when the call could not be rebuilt
    output_shapes: list[list[Any]] | None = None
    contiguous: bool | None = None  # False: an input strides through memory the kernel must copy or gather
    intensity_flop_per_byte: float | None = None  # flops / bytes; None without both
    achieved_gflops_per_s: float | None = None  # flops x calls / self time; None without a FLOP count or a verdict
    achieved_gb_per_s: float | None = None  # bytes x calls / self time; None without bytes or a verdict
    bound: str | None = None  # "compute" or "memory"; None without a verdict
    bound_basis: str | None = None  # why that roof, in words
    roof_gflops_per_s: float | None = None  # the roof at its intensity
    roof_gb_per_s: float | None = None  # the memory roof (Roofs.gb_per_s), on every row
    efficiency_pct: float | None = None  # achieved / roof; None: no verdict (`reason` says why)
    roof_note: str | None = None  # e.g. float64 against the fp32 roof, data that fits in the cache
    reason: str | None = None  # why there is no efficiency
    cache_resident: bool = False  # memory-bound and its bytes per call fit in the last-level cache


@dataclass
class Efficiency:
    """Hot operators against this machine's measured peaks (the efficiency layer)."""

    peaks: Peaks  # this machine's measured peaks: the probe's cached result, or measured for this report
    roofs: Roofs  # the peaks at the run's intra-op threads: the roofs every row is placed against
    operators: list[RooflineRow] = field(default_factory=list)  # most self time first
    timing: str = ""  # how the achieved rates were timed, in words
    instrumentation_overhead: float | None = None  # operator pass / uninstrumented wall time of the same work


# ---------------------------------------------------------------- counters (diagnose/layers/counters.py)


@dataclass
class PerfEvent:
    """One event of `perf stat -x,` (tools/perf.parse_stat_csv)."""

    raw_name: str  # as perf printed it, modifiers included (`cycles:u`)
    unit: str | None = None  # "msec" for task-clock
    value: float | None = None  # None when not supported or not counted
    supported: bool = True  # False: `<not supported>` (no PMU)
    counted: bool = True  # False: `<not counted>`
    running_pct: float | None = None  # share of the run it was scheduled (< 100: multiplexed, perf scaled it)
    metric: float | None = None  # perf's derived metric on the line (CPUs utilized for task-clock)
    metric_unit: str | None = None  # the unit perf printed for `metric` ("CPUs utilized", ...)


@dataclass
class PerfStat:
    """perf stat over the measured workload of the uninstrumented pass (tools/perf.metrics)."""

    cycles: int | None = None  # the cycles event; None: not counted
    instructions: int | None = None  # the instructions event; None: not counted
    cpi: float | None = None  # cycles / instructions
    ipc: float | None = None  # instructions / cycles
    cache_miss_pct: float | None = None  # cache-misses / cache-references
    branch_miss_pct: float | None = None  # branch-misses / branches
    task_clock_ms: float | None = None  # task-clock: CPU time of the process's threads
    cpus_utilized: float | None = None  # perf's "CPUs utilized" metric on the task-clock line
    context_switches: int | None = None  # the context-switches event
    cpu_migrations: int | None = None  # the cpu-migrations event
    page_faults: int | None = None  # the page-faults event (minor and major)
    not_supported: list[str] = field(default_factory=list)  # event names
    not_counted: list[str] = field(default_factory=list)  # event names perf printed as <not counted>
    # event names counted for < 99.5% of the run (perf scaled their counts)
    multiplexed: list[str] = field(default_factory=list)
    events: dict[str, PerfEvent] = field(default_factory=dict)  # event name (modifiers stripped) -> its line


@dataclass
class VtuneTask:
    """An ITT task (an aten op under emit_itt) in VTune's hotspots by task."""

    task: str | None  # its Task Type column (the aten op, under emit_itt), else its first column
    cpu_time_s: float | None = None  # its CPU Time
    spin_time_s: float | None = None  # its CPU Time:Spin Time
    overhead_time_s: float | None = None  # its CPU Time:Overhead Time


# a VTune summary value: a number (units taken off), text, or a nested table's row
VtuneValue = float | str | list[float | str | None] | None


@dataclass
class VtuneSummary:
    """The VTune pass's CSV reports (tools/vtune.summarize)."""

    source: str = "vtune"  # always "vtune"
    elapsed_s: float | None = None  # VTune's Elapsed Time: its whole pass, start-up included (not only the window)
    cpu_time_s: float | None = None  # CPU Time, all threads
    effective_time_s: float | None = None  # Effective Time: CPU time minus spin and overhead time
    spin_time_s: float | None = None  # Spin Time: threads busy-waiting
    overhead_time_s: float | None = None  # Overhead Time: the threading runtime's overhead
    spin_overhead_pct: float | None = None  # (spin + overhead) / CPU time
    cpi: float | None = None  # CPI Rate; None when the analysis gives none
    effective_cpu_utilization_pct: float | None = None  # Effective CPU Utilization
    total_thread_count: float | None = None  # Total Thread Count
    paused_time_s: float | None = None  # Paused Time
    top_tasks: list[VtuneTask] | None = None  # by CPU time; None without a tasks report
    summary: dict[str, VtuneValue] = field(default_factory=dict)  # metric path ("Elapsed Time/CPU Time") -> value


@dataclass
class Counters:
    """Hardware counters where the machine has them: perf (the counters layer) and/or VTune (--vtune). The top
    level holds the numbers findings read, from perf first, VTune filling what perf did not give."""

    source: str  # "perf" or "vtune": the tool that filled the top level first
    cpi: float | None = None  # cycles per instruction over the run
    ipc: float | None = None  # instructions per cycle (perf)
    cycles: int | None = None  # perf: cycles over the measured workload
    instructions: int | None = None  # perf: instructions over the measured workload
    cache_miss_pct: float | None = None  # perf: cache-misses / cache-references
    branch_miss_pct: float | None = None  # perf: branch-misses / branches
    cpus_utilized: float | None = None  # perf: task-clock's "CPUs utilized" (CPU time / wall time)
    perf: PerfStat | None = None  # every event of perf stat (the counters layer); None when perf did not count
    vtune: VtuneSummary | None = None  # VTune's summary (--vtune); None without it
    spin_overhead_pct: float | None = None  # VTune: spin + overhead share of CPU time
    spin_time_s: float | None = None  # VTune: CPU time threads spent busy-waiting
    overhead_time_s: float | None = None  # VTune: CPU time in the threading runtime's overhead
    cpu_time_s: float | None = None  # VTune: CPU time of all threads
    effective_cpu_utilization_pct: float | None = None  # VTune: Effective CPU Utilization


# ---- distributed: a torchrun job (--nproc-per-node; diagnose/distributed/view.py) ----


@dataclass
class CollectiveStat:
    """One collective's calls on a rank, or summed over ranks (gloo:all_reduce, gloo:broadcast, ...)."""

    name: str  # the backend's annotation: "gloo:all_reduce"
    calls: int  # events of it in the operator pass's window
    us: float  # summed duration, from the start of the exchange until every peer contributed (includes waiting)
    elements: int  # summed tensor elements exchanged


@dataclass
class RankOperator:
    """One row of a rank's own operator table (operator pass), most self CPU time first."""

    name: str  # the operator (aten::addmm)
    input_shapes: list[list[Any]]  # per input, as in OperatorRow
    calls: int  # in the rank's operator-pass window
    self_cpu_us: float  # over those calls
    self_pct: float  # share of this rank's operator self time
    source: str | None  # file.py:LINE with most of its self time; None outside the user's code


@dataclass
class RankThreads:
    """The thread sampler's process row of this rank (matched by pid)."""

    cpu_used: float | None = None  # CPUs the rank's threads used on average
    mean_runnable: float | None = None  # time-averaged runnable threads of the rank
    wait_share: float | None = None  # share of runnable time spent waiting for a CPU
    active_threads: int = 0  # busy threads over every pool
    threads: dict[str, int] | None = None  # pool -> thread count


@dataclass
class RankResult:
    """One rank across the passes: identity, status, and what its uninstrumented and operator passes measured."""

    rank: int  # global rank (torchrun's RANK)
    passes: dict[str, str] = field(default_factory=dict)  # pass -> ok, failed, stopped, missing
    errors: dict[str, str] = field(default_factory=dict)  # pass -> error message
    status: str = "ok"  # the worst over the passes: ok, stopped (torchrun ended it), failed, missing (wrote nothing)
    local_rank: int | None = None  # LOCAL_RANK: its index on its node
    node_rank: int | None = None  # GROUP_RANK: its node
    hostname: str | None = None  # socket.gethostname() in the rank
    world_size: int | None = None  # WORLD_SIZE as the rank saw it
    local_world_size: int | None = None  # LOCAL_WORLD_SIZE: ranks on its node
    omp_num_threads: str | None = None  # OMP_NUM_THREADS as the rank saw it (torchrun sets 1 when unset)
    failed_at: float | None = None  # the rank's clock (time.time()) when it failed first
    pid: int | None = None  # in the uninstrumented pass
    wall_s: float | None = None  # uninstrumented pass, from the rank's start (includes the rendezvous wait)
    iteration_median_s: float | None = None  # uninstrumented pass: median step (or call) time; None without steps
    # torch.get_num_threads() as the target left it (uninstrumented pass, else operator pass)
    intra_op_threads: int | None = None
    instrumented_wall_s: float | None = None  # operator pass
    operator_self_us: float | None = None  # operator pass: all operator self time
    compute_us: float | None = None  # operator self time minus the c10d:: launches
    collective_us: float | None = None  # wall time with a collective in flight
    collective_share: float | None = None  # collective / (collective + compute)
    collectives: list[CollectiveStat] = field(default_factory=list)  # operator pass: its collectives, most time first
    operators: list[RankOperator] = field(default_factory=list)  # the top rows (view.PER_RANK_ROWS)
    other_operators_us: float | None = None  # self time of the rows below them
    threads: RankThreads | None = None  # None: the sampler did not see this rank (or did not run)


@dataclass
class NodeThreads:
    """The thread sampler's view of one node (its process tree: torchrun and every local rank)."""

    mean_runnable: float | None = None  # Threads.mean_runnable of the node's tree
    runqueue_wait_share: float | None = None  # Threads.runqueue_wait_share of the node's tree
    compute_processes: int | None = None  # Threads.compute_processes of the node's tree
    threads_per_rank: int | None = None  # most busy threads of one rank
    fair_threads_per_rank: int = 1  # usable CPUs // ranks on the node


@dataclass
class NodeResult:
    node_rank: int  # torchrun's node rank (GROUP_RANK); 0 when the ranks did not say
    hostname: str | None = None  # its first rank's hostname
    ranks: list[int] = field(default_factory=list)  # global ranks that ran on it
    usable_cpus: int | None = None  # Machine.usable_cpus of the report that ran it
    threads: NodeThreads | None = None  # None: the threads layer did not run


@dataclass
class FailedRank:
    """A rank whose status is not ok, and where it stopped."""

    rank: int  # global rank
    status: str  # failed, stopped, missing
    node_rank: int | None = None  # its node
    pass_name: str | None = None  # the first pass it ended with that status ("pass" in schema "1")
    error: str | None = None  # its first error message; None when it gave none
    failed_at: float | None = None  # the rank's clock
    first: bool = False  # the earliest failure: the others failed because of it


@dataclass
class Collectives:
    """Collectives against compute over the ranks' operator passes, summed over ranks."""

    collective_us: float  # wall time with a collective in flight, summed over ranks (waiting for slower ranks included)
    compute_us: float  # operator self time minus the c10d:: launches, summed over ranks
    share: float | None  # collective / (collective + compute)
    by_name: list[CollectiveStat] = field(default_factory=list)  # most time first
    ranks: int = 0  # ranks whose operator pass was measured
    note: str = ""  # what the two times mean


@dataclass
class StragglerOperator:
    """An operator the slowest rank spends more time in than the fastest (summed over its shapes)."""

    name: str  # the operator (aten::addmm)
    slow_us: float  # the slowest rank's self time in it, over its top rows (RankResult.operators)
    fast_us: float  # likewise, the fastest rank's
    diff_us: float  # slow_us - fast_us
    shapes: list[list[Any]]  # input shapes of its largest row
    source: str | None  # its largest row's user line


@dataclass
class Straggler:
    """The rank that computes most against the one that computes least (operator pass)."""

    rank: int  # the rank with the most compute
    fastest_rank: int  # the rank with the least
    measure: str  # what `slow` and `fast` are: "compute_us" (operator self time minus collective launches)
    slow: float  # the slowest rank's measure
    fast: float  # the fastest rank's measure
    slower_pct: float | None  # 100 x (slow - fast) / fast; None when fast is 0
    wall_s: float | None = None  # the two ranks' uninstrumented wall times
    fastest_wall_s: float | None = None  # the fastest rank's
    node_rank: int | None = None  # the slowest rank's node
    fastest_node_rank: int | None = None  # the fastest rank's node
    fastest_extra_collective_us: float | None = None  # the fastest rank's collective time minus the slowest's
    operators: list[StragglerOperator] = field(default_factory=list)  # the largest differences first


@dataclass
class Observation:
    """What the ranks together say (straggler, collectives): beside the findings, whose kinds are fixed."""

    kind: str  # straggler, collectives
    severity: str  # low, or medium past the second threshold (report/distributed.py)
    title: str  # one sentence, read first
    evidence: dict[str, Any]  # the numbers that crossed the threshold, as a finding's evidence
    suggestion: str  # what to try, concretely


@dataclass
class MergedFrom:
    """One node report `diagnose merge` combined."""

    report: str  # its path as given
    node_rank: int  # the lowest node rank in that report
    started_at: str = ""  # its run.started_at
    hostname: str | None = None  # its node's hostname; None when unknown


@dataclass
class Distributed:
    """A torchrun job: per-rank results, and the world, collectives and straggler derived from them."""

    launcher: str = ""  # the pass's command line (SPEC.json stands for the pass's spec)
    nproc_per_node: int = 1  # --nproc-per-node: ranks per node
    torchrun_args: list[str] = field(default_factory=list)  # the user's rendezvous options, [] for --standalone
    world_size: int | None = None  # the largest WORLD_SIZE a rank saw, else the number of ranks; None without ranks
    backend: str | None = None  # from the collectives' names: gloo, nccl, mpi, ucc
    ranks: list[RankResult] = field(default_factory=list)  # by rank
    nodes: list[NodeResult] = field(default_factory=list)  # by node rank
    failed_ranks: list[FailedRank] = field(default_factory=list)  # ranks whose status is not ok
    collectives: Collectives | None = None  # None: no operator pass measured
    straggler: Straggler | None = None  # None: fewer than two ranks measured
    # straggler and collectives, past report/distributed.py's thresholds
    observations: list[Observation] = field(default_factory=list)
    # diagnose merge: what was merged, missing nodes, whose threads these are
    notes: list[str] = field(default_factory=list)
    merged_from: list[MergedFrom] = field(default_factory=list)  # diagnose merge: the node reports


# ---- threads: the thread sampler's view of the process tree (layers/threads/, findings/threads.py)
# CPUs are counts of CPUs averaged over the sampled span (duration_s); shares are 0..1.


@dataclass
class PoolStats:
    """One thread pool of a process, or of the whole tree: main, intra_op, inter_op, dataloader_pin, python, other
    (layers/threads/analysis.py says how a thread's name, or the target's own account, gives its pool)."""

    threads: int = 0  # threads of the pool seen over the run
    active_threads: int = 0  # threads that used >= 1% of a CPU over the run (analysis.ACTIVE_MIN_CPUS)
    cpu_s: float = 0.0  # their CPU time
    wait_s: float = 0.0  # time on a run queue, waiting for a CPU
    mean_runnable: float = 0.0  # its threads that wanted a CPU (running or waiting), time-averaged


@dataclass
class ThreadProcess:
    """One process of the target's tree as the sampler saw it."""

    pid: int  # its process id
    ppid: int | None = None  # its parent's pid, as last read
    role: str = "child"  # target, dataloader_worker, mp_worker, helper, child
    name: str | None = None  # its comm
    cmdline: str = ""  # at most analysis.CMDLINE_MAX_CHARS
    threads: dict[str, int] = field(default_factory=dict)  # pool -> threads seen over the run
    active_threads: dict[str, int] = field(default_factory=dict)  # pool -> threads that did work
    max_threads: int = 0  # most threads alive at once
    # its threads that wanted a CPU (running or waiting), time-averaged over duration_s
    mean_runnable: float | None = None
    cpu_used: float | None = None  # CPUs its threads used on average over duration_s
    cpu_s: float | None = None  # its threads' CPU time
    wait_s: float | None = None  # its threads' run-queue wait
    wait_share: float | None = None  # wait over runnable time
    involuntary_switches: int = 0  # preemptions
    pools: dict[str, PoolStats] = field(default_factory=dict)  # pool -> the totals of its threads in that pool
    cpus_allowed: list[str] = field(default_factory=list)  # its threads' affinity lists, e.g. "0-1"
    first_seen_s: float | None = None  # since the first sample
    last_seen_s: float | None = None  # the last sample that saw it, since the first sample
    compute: bool = False  # used >= 0.1 CPU or wanted >= 0.2 on average (helpers never)
    rank: int | None = None  # its torchrun rank (distributed/view.py), None outside torchrun


@dataclass
class OtherProcess:
    """A process outside the tree that used CPU during the run (the top few)."""

    pid: int  # its process id
    name: str | None = None  # its comm
    cpu_s: float = 0.0  # CPU time it used between the first and the last sample


@dataclass
class BusyThread:
    """A thread that did work (the doctor's topology check reads where it ran)."""

    pid: int  # its process's id
    tid: int  # its thread id
    pool: str  # main, intra_op, inter_op, dataloader_pin, python or other (analysis.pool_of)
    cpu_used: float | None = None  # CPUs it used on average (its CPU time / Threads.duration_s)
    cpus: list[int] = field(default_factory=list)  # CPUs it was seen running on
    cpu_samples: int = 0  # samples that read its CPU
    cpu_changes: int = 0  # times its CPU differed from the previous sample


@dataclass
class ProcessTimeline:
    """One process's share of the timeline, per interval."""

    pid: int  # a process of Threads.processes
    runnable: list[float] = field(default_factory=list)  # its threads that wanted a CPU, per interval
    cpu_used: list[float] = field(default_factory=list)  # CPUs its threads used, per interval


@dataclass
class ThreadTimeline:
    """Per-interval averages (each exact), at most analysis.TIMELINE_MAX_POINTS intervals; threads.png."""

    t_s: list[float] = field(default_factory=list)  # end of each interval, since the first sample
    runnable: list[float] = field(default_factory=list)  # the tree's
    cpu_used: list[float] = field(default_factory=list)  # the tree's CPUs in use
    machine_busy_cpus: list[float | None] = field(default_factory=list)  # /proc/stat; None where unread
    processes: list[ProcessTimeline] = field(default_factory=list)  # in the order of Threads.processes


@dataclass
class SamplerHealth:
    """How the sampling went: what it missed and what it cost."""

    samples: int = 0  # samples taken (a last one that found the tree gone included)
    kept_snapshots: int = 0  # snapshots kept after decimations: the timeline's points
    missed_samples: int = 0  # slots skipped because a sample ran long or the sampler was descheduled
    late_samples: int = 0  # samples that began more than half an interval after their slot
    unreadable_files: int = 0  # /proc files that could not be read, vanished_files included
    vanished_files: int = 0  # unreadable because the thread or process had exited
    sampler_cpu_s: float | None = None  # the sampler process's own CPU time
    # diagnose attach: py-spy's and diagnose's own CPU time while sampling (not counted as other processes')
    observers_cpu_s: float | None = None
    overhead_cpu_share: float | None = None  # the sampler's CPU over the wall time, as a share of one CPU
    read_s_mean: float | None = None  # one sample's reading time
    interval_s: float | None = None  # the requested interval between samples
    final_interval_s: float | None = None  # after decimations and slowdowns
    decimations: int = 0  # times the kept snapshots were halved (and the interval doubled) to bound memory
    slowdowns: int = 0  # times the interval was doubled to keep the sampler within its CPU budget
    stopped_by: str | None = None  # tree_exited, stop, max_duration, root_not_found
    error: str | None = None  # why the sampler failed ("no process PID"); None when it worked


@dataclass
class EnvSetting:
    """One threading setting and what it implies on this machine (layers/threads/environment.py)."""

    name: str  # an environment variable (OMP_NUM_THREADS), or a torch setting (intra_op_threads, parallel_backend)
    value: str | int | None  # None: unset
    implication: str  # what the setting means on this machine, in a sentence or two
    level: str = "info"  # "warning" (likely to cost time here) or "info"


@dataclass
class ThreadCall:
    """The target's own line that set a thread count (uninstrumented pass, runner._record_thread_calls and
    runner._follow_thread_variables)."""

    # set_num_threads or set_num_interop_threads (torch's calls); OMP_NUM_THREADS or MKL_NUM_THREADS (an
    # assignment to the variable in code, os.environ[...] = or os.putenv); DataLoader (one built with workers)
    call: str
    threads: int  # the count it passed: threads, or for a DataLoader its num_workers
    location: str | None = None  # file.py:LINE in the user's code


@dataclass
class PythonThread:
    """A thread the target started with Python's threading (uninstrumented pass, runner._record_python_threads):
    /proc names such a thread like its process, as it does OpenMP's workers, so only the target can say which
    of its threads are its own."""

    pid: int  # the process that started it (the target's)
    tid: int  # its native (kernel) thread id: the sampler's tid
    name: str  # threading's name: Thread-1 (producer), ThreadPoolExecutor-0_0
    target: str | None = None  # the function it runs (qualified name), when it was given one
    defined_at: str | None = None  # file.py:LINE of that function, when it is the user's
    started_at: str | None = None  # file.py:LINE in the user's code that started it


@dataclass
class SweepPoint:
    """One setting of the thread sweep, run `repeats` times interleaved with the others."""

    intra_op_threads: int  # threads it ran with: torch.set_num_threads, OMP_NUM_THREADS and MKL_NUM_THREADS
    dataloader_workers: int | None = None  # None: the target's own count
    runs_s: list[float] = field(default_factory=list)  # seconds per unit (Sweep.unit) of each run that worked
    failed_runs: int = 0  # runs that measured nothing (the pass failed, or a worker point built no DataLoader)
    median_s: float | None = None  # median of runs_s; None when every run failed
    throughput_per_s: float | None = None  # 1 / median_s
    spread_pct: float | None = None  # (slowest - fastest run) / median


@dataclass
class SweepSetting:
    """A setting of the sweep and its throughput: the best measured, or one passed over."""

    throughput_per_s: float  # its median run's throughput, per second (Sweep.unit)
    intra_op_threads: int | None = None  # set for the thread sweep's points
    dataloader_workers: int | None = None  # set for the worker sweep's points
    lead_pct: float | None = None  # passed over: its lead over the best within the usable CPUs


@dataclass
class SweepPick:
    """The worker sweep's choice: the smallest count within the tolerance of the best throughput."""

    throughput_per_s: float  # the chosen count's, per second (Sweep.unit)
    dataloader_workers: int | None = None  # the chosen worker count
    # the best worker setting (the fastest, unless above the usable CPUs and not clearly faster)
    best: SweepSetting | None = None
    passed_over: SweepSetting | None = None  # faster, above the usable CPUs, but not clearly
    tolerance_pct: int = 5  # the chosen count is within this % of the best's throughput


@dataclass
class SweepRecommendation:
    """The settings the sweep measured best, as environment and as code."""

    intra_op_threads: int | None = None  # the smallest thread count within Sweep.tolerance_pct of the best throughput
    dataloader_workers: int | None = None  # None: the worker count was not swept
    throughput_per_s: float | None = None  # that thread count's, per second (Sweep.unit)
    # the best thread setting (the fastest, unless above the usable CPUs and not clearly faster)
    best: SweepSetting | None = None
    passed_over: SweepSetting | None = None  # faster, above the usable CPUs, but not clearly
    gain_vs_configured_pct: float | None = None  # throughput against the configured thread count's
    env: str = ""  # "OMP_NUM_THREADS=2 MKL_NUM_THREADS=2"
    code: str = ""  # "torch.set_num_threads(2)", with "; DataLoader(..., num_workers=N)" when swept


@dataclass
class Sweep:
    """--sweep: the workload measured at several thread settings (layers/threads/sweep.py)."""

    status: str | None = None  # set when it did not finish ("interrupted before the sweep finished")
    # what a point's seconds are per: "iterations" (function mode), "steps" (script mode: the window's median
    # step) or "runs" (a script with no steps: the whole run); "runs" in schema "1" meant steps when there were
    unit: str = "runs"
    repeats: int = 0  # runs of each point (--sweep-repeats), interleaved with the other points
    tolerance_pct: int = 5  # the smallest setting within this of the best throughput is recommended
    usable_cpus: int = 0  # Machine.usable_cpus: the top default thread point; a setting above it must be clearly faster
    # the target's own intra-op count (Machine.intra_op_threads), one of the default points
    configured_threads: int | None = None
    # most DataLoader workers alive at once (Threads.dataloader_workers); None: workers not swept
    configured_workers: int | None = None
    # the thread points: 1, 2, 4, ... up to the usable CPUs, and the configured count (or --sweep-threads)
    threads: list[SweepPoint] = field(default_factory=list)
    workers: list[SweepPoint] = field(default_factory=list)  # at the chosen thread count, with a DataLoader
    workers_pick: SweepPick | None = None  # None: the workers were not swept, or no worker point measured anything
    recommendation: SweepRecommendation | None = None  # None: no thread point measured anything


@dataclass
class Threads:
    """Who wanted the CPUs over the uninstrumented pass, across the target's whole process tree
    (layers/threads/analysis.py defines each measure). With fewer than two samples the measures are None
    and `reason` says why."""

    usable_cpus: int = 0  # Machine.usable_cpus (or os.cpu_count()), the measures' yardstick; 0: no sampler recording
    samples: int = 0  # samples the sampler took (health.samples); 0: no sampler recording
    duration_s: float = 0.0  # between the first and the last sample
    # the requested interval between samples; None: fewer than two samples, or no sampler recording
    interval_s: float | None = None
    schedstat_available: bool = False  # False: CPU and runnable time from sampled thread states
    method: str | None = None  # "schedstat" or "state_sampling"
    mean_runnable: float | None = None  # threads that wanted a CPU (running or on a run queue)
    runqueue_wait_share: float | None = None  # run-queue wait over runnable time
    cpu_used: float | None = None  # CPUs the tree used on average (its threads' CPU time / duration_s)
    cpu_s: float | None = None  # CPU time of all the tree's threads over duration_s
    # run-queue wait of all the tree's threads (state sampling: runnable time minus CPU time)
    wait_s: float | None = None
    busy_share: float | None = None  # share of the wall time the tree kept at least one CPU busy
    # preemptions (nonvoluntary context switches) of the tree's threads per second
    involuntary_switches_per_s: float | None = None
    machine_busy_cpus: float | None = None  # /proc/stat (in a container maybe the host's)
    machine_cpus_seen: float | None = None  # CPUs /proc/stat accounts for
    others_cpus: float | None = None  # the machine's busy CPUs minus the tree's and the sampler's
    # processes outside the tree: the top 5 by CPU time between the first and the last sample
    other_processes: list[OtherProcess] = field(default_factory=list)
    processes: list[ThreadProcess] = field(default_factory=list)  # the target first, then by CPU time
    compute_processes: int = 0  # processes with `compute` set
    dataloader_workers: int = 0  # most alive at once
    pools: dict[str, PoolStats] = field(default_factory=dict)  # pool -> the tree's total
    # threads that used >= 1% of a CPU (analysis.ACTIVE_MIN_CPUS), with the CPUs they ran on
    busy_threads: list[BusyThread] = field(default_factory=list)
    timeline: ThreadTimeline | None = None  # None: fewer than two samples, or no sampler recording
    health: SamplerHealth | None = None  # None: no sampler recording was analysed
    reason: str | None = None  # why nothing was measured
    # the threading settings, each with what it implies on this machine (environment.audit)
    environment: list[EnvSetting] = field(default_factory=list)
    thread_calls: list[ThreadCall] = field(default_factory=list)  # the target's own thread-count calls
    python_threads: list[PythonThread] = field(default_factory=list)  # threads the target started (pool "python")
    sweep: Sweep | None = None  # --sweep
    node_rank: int | None = None  # a merged multi-node report: the node whose threads these are

    def busy_python(self, pid: int | None = None) -> list[tuple[PythonThread, BusyThread]]:
        """The Python threads the target started that did work, in the "python" pool (not torch's own, such as
        DataLoader's pin-memory thread), of process `pid` or any, busiest first."""
        started = {(p.pid, p.tid): p for p in self.python_threads}
        pairs = [(started[(b.pid, b.tid)], b) for b in self.busy_threads
                 if b.pool == "python" and (b.pid, b.tid) in started and (pid is None or b.pid == pid)]
        return sorted(pairs, key=lambda pair: -(pair[1].cpu_used or 0.0))


@dataclass
class MemorySlope:
    """A least-squares line through per-step memory readings (diagnose/layers/memory/growth.py)."""

    bytes_per_step: float  # the slope: growth per step over the window
    # its 95% interval: slope +- t(0.975, n-2) x the slope's standard error (ordinary least squares)
    ci_low: float
    ci_high: float  # upper end of that interval
    steps: int  # steps the line spans (readings - 1)
    # the same line over the window's later half: growth that continues there is not warm-up; None: too few steps
    late_bytes_per_step: float | None = None
    late_ci_low: float | None = None  # the later half's 95% interval
    late_ci_high: float | None = None  # upper end of the later half's interval


@dataclass
class MemoryGrowth:
    """One memory reading taken at every step boundary of a window, and whether it grows through it."""

    source: str  # "rss": the process's resident set (uninstrumented pass); "allocator": torch's live CPU bytes
    # the readings: the RSS at the window's start, then at the end of each of its steps; torch's live bytes (made
    # in the window) at the end of each step (at most 100,000)
    readings_bytes: list[int] = field(default_factory=list)
    slope: MemorySlope | None = None  # None: fewer than 3 readings
    # attach mode: the readings are this many seconds apart, not step boundaries (the slope's "step" is this
    # interval); None: one reading per step
    interval_s: float | None = None
    # growth continues through the window: the slope's interval is above 0 and the later half's is too, and
    # reaches half the window's slope (warm-up growth that settles does not count)
    continues: bool = False
    verdict: str = ""  # one line: why it does or does not count as growth


@dataclass
class MemoryProjection:
    """Where the growth leads by the script's end, against the memory there is (read at the window's end)."""

    total_steps: int | None = None  # the script's steps, when known; None: unknown (basis says why)
    basis: str = ""  # how total_steps was read: "range(args.steps) at train.py:30 = 500", or why it is unknown
    step_at_window_end: int | None = None  # steps run when the window ended
    more_bytes: float | None = None  # growth per step x steps left; None: total unknown or no growth
    rss_bytes: int | None = None  # the process's resident set at the window's end
    mem_available_bytes: int | None = None  # /proc/meminfo MemAvailable at the window's end
    cgroup_limit_bytes: int | None = None  # the cgroup's memory limit (memory.max, v1 limit_in_bytes); None: none
    cgroup_used_bytes: int | None = None  # the cgroup's memory use then (memory.current, v1 usage_in_bytes)
    # what the process may still take: MemAvailable, or the cgroup's limit less its use when that is smaller
    headroom_bytes: int | None = None


@dataclass
class RetainedGroup:
    """Allocations made in the operator pass's window and still alive at its end, from one site."""

    source: str | None  # the user's line that made them (file.py:LINE), None outside the user's code
    library_line: str | None  # innermost line outside torch (a library's, or yours in your own model)
    module: str | None  # module path whose forward made them ("" the outermost module), None: outside any
    op: str | None  # the operator that allocated them (aten::cat, aten::addmm)
    input_shapes: list[Any] = field(default_factory=list)  # that operator's input shapes (first allocation)
    allocations: int = 0  # allocations alive at the window's end
    bytes: int = 0  # their bytes
    steps: int = 0  # window steps that made at least one of them (a leak adds some every step)
    # growth per step this site accounts for: bytes / window steps when it kept allocations of most steps, or
    # the growth of its one live buffer when that was re-made bigger each step (grown_buffer); 0: neither
    bytes_per_step: float = 0.0
    grown_buffer: bool = False  # one live allocation re-made bigger each step (a torch.cat buffer)
    # "autograd graph": not referenced from Python, kept by a graph's saved tensors; "container": a tensor
    # Python holds (in `holder`); "unknown": neither could be told
    held_by: str = "unknown"
    grad_fn: str | None = None  # the held tensor's grad_fn (it keeps its graph alive), None: no graph
    holder: str | None = None  # the container holding it: "list outputs", "dict cache", "variable buf"
    holder_line: str | None = None  # the user's line that puts it there (append, assignment, cat), when found


@dataclass
class Retained:
    """What the operator pass's window left alive (unpaired allocation events of its memory profile)."""

    allocations: int = 0  # allocations made in the window and alive at its end
    bytes: int = 0  # their bytes
    groups: list[RetainedGroup] = field(default_factory=list)  # by site, most bytes per step first (at most 20)
    scope: str = ""  # what was looked at, and what could not be


@dataclass
class MemoryAtPeak:
    """Live memory at the step's peak, by what holds it (parameters, gradients, optimizer state from the
    tensors themselves at the window's end; the rest from the operator pass's allocations)."""

    parameters_bytes: int | None = None  # the outermost modules' parameters and buffers
    gradients_bytes: int | None = None  # their .grad tensors
    optimizer_state_bytes: int | None = None  # the state tensors of the optimizers whose step() ran
    # allocations made in the window alive at its peak: activations saved for backward (freed by a backward
    # operator) and the rest (temporaries, outputs)
    saved_for_backward_bytes: int | None = None
    temporaries_bytes: int | None = None  # alive at the peak and not freed by a backward operator
    # saved for backward per module path at the peak, most first (at most 10): [module, bytes]
    saved_by_module: list[list[Any]] = field(default_factory=list)
    window_peak_bytes: int | None = None  # saved_for_backward_bytes + temporaries_bytes
    scope: str = ""  # how each part was read


@dataclass
class Memory:
    """Where memory goes, whether it grows, and what keeps it alive (diagnose/layers/memory/)."""

    rss: MemoryGrowth | None = None  # the uninstrumented pass's RSS at every step boundary of the window
    allocator: MemoryGrowth | None = None  # torch's live CPU bytes at every step boundary (operator pass)
    projection: MemoryProjection | None = None  # the growth to the script's end, against available memory
    retained: Retained | None = None  # what the operator pass's window left alive, by site
    peak: MemoryAtPeak | None = None  # live memory at the peak, by category
    notes: list[str] = field(default_factory=list)  # what could not be read, and why


@dataclass
class SampledLine:
    """A line of the user's code that sampled time went through (diagnose attach)."""

    location: str  # file.py:LINE, the innermost frame of the user's code in the samples
    samples: int  # samples with this line
    share_pct: float  # of the samples of what it belongs to (the operator, the library)
    function: str | None = None  # the user's function holding the line


@dataclass
class SampledOperator:
    """An ATen operator seen on the native stacks (the innermost at::_ops::<op> frame), diagnose attach."""

    name: str  # aten::addmm (from at::_ops::addmm; the overload dropped, as the operator table names rows)
    samples: int  # thread samples inside it (its own time: no operator inside it was deeper)
    share_pct: float  # of all samples inside an operator: comparable with an operator row's self_pct
    time_pct: float  # of all the sampled threads' busy samples
    source: str | None = None  # the user's line with most of its samples; None: no user frame
    sources: list[SampledLine] = field(default_factory=list)  # by samples, at most 5
    library_line: str | None = None  # innermost Python frame outside torch (a model library's line, or yours)
    function: str | None = None  # the Python function of that library line: "BertSelfAttention.forward"
    # of `samples`, those whose operator frame the unwinder lost, given to it from the same Python line (stacks.impute)
    imputed_samples: int = 0
    # the classes whose forward is on the stack, outermost first ("BertModel > BertEncoder > BertLayer > ..."),
    # in most of its samples: frames name classes, not the attribute path (encoder.layer.3) the operator pass has
    modules: str | None = None
    native: str | None = None  # the deepest symbolised native frame below it (a BLAS kernel, an OpenMP call)


@dataclass
class SampledFunction:
    """A Python function by the samples whose innermost Python frame it is (diagnose attach)."""

    function: str  # py-spy's name: "step", "Module._call_impl"
    location: str  # file.py:LINE of its line with most samples
    kind: str  # user, library, torch (torch's Python code), stdlib
    self_samples: int  # innermost Python frame, in or out of native code below it
    total_samples: int  # anywhere on the stack
    self_pct: float  # of all the sampled threads' busy samples
    total_pct: float
    in_operators_pct: float = 0.0  # of its self samples, the share inside an ATen operator below it


@dataclass
class SampledLibrary:
    """Time outside torch, by library: samples whose innermost frame is a library other than torch (diagnose
    attach)."""

    library: str  # numpy, PIL, python (the interpreter running Python code), ...
    samples: int
    share_pct: float  # of all the sampled threads' busy samples
    source: str | None = None  # the user's line with most of them
    sources: list[SampledLine] = field(default_factory=list)  # by samples, at most 5


@dataclass
class SampledSteps:
    """Steps seen in the samples: each episode of the step's marker frame starts one (diagnose attach)."""

    detector: str  # "optimizer" (Optimizer.step frames) or "forward" (the outermost nn.Module call)
    detail: str  # the marker frame: "SGD.step (torch/optim/sgd.py)", "Module._call_impl at train.py:30"
    steps: int  # episode starts seen
    median_s: float  # median time between consecutive starts
    step_s: list[float] = field(default_factory=list)  # those times, in order (at most 1000)
    min_samples_per_step: int = 0  # the fewest samples a step had: under 4, steps may be missed


@dataclass
class SampledProcess:
    """A process whose Python stacks were sampled (diagnose attach)."""

    pid: int
    role: str  # target, rank N, dataloader_worker, child
    samples: int  # thread samples taken in it
    threads: int  # Python threads seen
    command: str = ""  # its command line, shortened
    rank: int | None = None  # torchrun's RANK from its environment


@dataclass
class Sampled:
    """A running process tree sampled from outside (diagnose attach PID): py-spy's Python and native stacks,
    turned into operators, Python hotspots, time outside torch and steps (diagnose/attach/stacks.py).
    Shares are of samples: a share is only as precise as its sample count allows (about 1/sqrt(samples))."""

    sampler: str  # "py-spy 0.4.3 record --native"
    rate_hz: float  # samples per second asked for, per thread
    duration_s: float  # from the first sample to the last
    samples: int  # thread samples with a Python stack (busy threads: py-spy leaves idle ones out)
    errors: int = 0  # samples py-spy could not take
    operator_samples: int = 0  # of `samples`, inside an ATen operator
    # of them, kernel samples py-spy could not unwind to their operator frame (generated code, lost frames), given
    # to the operators seen from the same Python line (attach/stacks.impute)
    imputed_samples: int = 0
    exited: bool = False  # the target exited while being sampled: the report covers what came before
    processes: list[SampledProcess] = field(default_factory=list)
    operators: list[SampledOperator] = field(default_factory=list)  # by samples, at most 30
    functions: list[SampledFunction] = field(default_factory=list)  # by self samples, at most 30
    libraries: list[SampledLibrary] = field(default_factory=list)  # outside torch, by samples
    steps: SampledSteps | None = None  # None: no step marker seen often enough
    notes: list[str] = field(default_factory=list)  # what could not be sampled, and why


@dataclass
class Report:
    target: TargetInfo  # what ran: the script as given, its arguments, the mode (TargetInfo)
    # the CPUs the target could use and torch's threading settings (Machine)
    machine: Machine = field(default_factory=Machine)
    # how the target ran: exit code, error, wall times, per-step times, page faults (Run)
    run: Run = field(default_factory=Run)
    # layer name -> its status, why skipped or failed, its time, notes and missing files
    layers: dict[str, LayerStatus] = field(default_factory=dict)
    # the operator pass's table: one row per (operator, input shapes), most self CPU time first (<= 1000)
    operators: list[OperatorRow] = field(default_factory=list)
    operator_summary: OperatorSummary | None = None  # None: the operator pass gave nothing
    # the call-graph (cProfile) pass's functions: the top 30 by self time, and user functions >= 1% cumulative
    python_hotspots: list[PythonFunction] = field(default_factory=list)
    python_summary: PythonSummary | None = None  # None: the call-graph pass gave nothing
    # thread sampling (layers/threads/), the target's own thread-count calls and --sweep; None when none of them
    # gave anything (without the threads layer the section may hold only thread_calls or a sweep)
    threads: Threads | None = None
    # the microbench layer's rows: the top operators measured alone at their shapes, per thread count
    microbenchmarks: list[MicrobenchRow] = field(default_factory=list)
    efficiency: Efficiency | None = None  # machine peaks, per-operator roofline (None: the layer did not run)
    counters: Counters | None = None  # perf / VTune, where the machine has them (None: no counters)
    steps: Steps | None = None  # script mode (None in function mode)
    modules: Modules | None = None  # operator time per nn.Module (None: no module ran, or an older report)
    autograd: Autograd | None = None  # graph recording in the operator pass's window (None: an older report)
    compile: Compile | None = None  # torch.compile's work in the uninstrumented pass (None: nothing compiled)
    hangs: list[Hang] = field(default_factory=list)  # passes stopped because the target hung
    doctor: Doctor | None = None  # environment checks and measured trials (None: an older report)
    what_if: WhatIf | None = None  # --what-if: code changes measured on the user's steps (None: not asked for)
    stacks: list[FoldedStack] = field(default_factory=list)  # the operator pass's folded stacks (stacks.folded)
    # torchrun jobs (--nproc-per-node): world, nodes, per-rank tables, collectives, straggler
    # (diagnose/distributed/view.py); None for a single process
    distributed: Distributed | None = None
    # where a step's time goes, measured slice by slice (diagnose/budget.py); None: no timing to split
    step_budget: StepBudget | None = None
    # where memory goes, whether it grows, what keeps it alive (None: no step window was measured)
    memory: Memory | None = None
    # diagnose attach PID: what the sampled stacks say (None: not an attach report)
    sampled: Sampled | None = None
    # the answer in one sentence: healthy or not, with its numbers (findings/verdict.py); None: not judged
    verdict: Verdict | None = None
    findings: list[Finding] = field(default_factory=list)  # the diagnosis (diagnose/findings/), most important first
    # results the tool doubts itself (a finding with `doubts`), below the findings and never among them
    not_confirmed: list[NotConfirmed] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)  # file key -> name of each file written beside report.json
    # this report format's version (SCHEMA_VERSION; older ones are migrated by report/io.py)
    schema_version: str = SCHEMA_VERSION

    def recorded_span(self) -> tuple[float | None, str]:
        """(seconds the operator pass recorded, how): in function mode with --iters above --profile-iters only
        the last iterations are recorded (instrumented_iterations holds just those), so their count times
        their median; otherwise the operator pass's wall time."""
        it, iters = self.run.instrumented_iterations, self.target.iters
        if it and iters and it.n < iters and it.median_s > 0:
            return it.n * it.median_s, f"{it.n} recorded iterations x their median {it.median_s:.4g} s"
        return self.run.instrumented_wall_s, "the operator pass's wall time"

    def real_span(self) -> tuple[float | None, str]:
        """(seconds the uninstrumented pass took for the work the operator pass recorded, how): the recorded steps
        (or calls) at the uninstrumented pass's mean one; without steps, its wall time (every pass ran the whole
        run); else the operator pass's own span (recorded_span)."""
        run = self.run
        recorded = self.profiled_steps()
        if run.iterations and run.iterations.n and recorded and run.wall_s:
            mean = run.wall_s / run.iterations.n
            unit = "call" if self.target.mode == "function" else "step"
            return recorded * mean, f"{recorded} recorded {unit}s x the uninstrumented pass's mean {unit}, {mean:.4g} s"
        if not run.iterations and self.target.mode == "script" and run.wall_s:
            return run.wall_s, "the uninstrumented pass's wall time (every pass ran the whole run)"
        return self.recorded_span()

    def timed_steps(self) -> int | None:
        """The steps (or measured calls) the operator pass's clock and fault count spanned: in function mode every
        measured call (its profiler's schedule records only the last --profile-iters of them), in a script the
        window's steps."""
        run = self.run
        return self.target.iters or (run.instrumented_iterations.n if run.instrumented_iterations else None)

    def profiled_steps(self) -> int | None:
        """The steps (or calls) the operator pass's profiler recorded: its rows' calls and bytes are over these."""
        run = self.run
        return run.instrumented_iterations.n if run.instrumented_iterations else self.timed_steps()

    def callgraph_scale(self, pace: float | None = None) -> float:
        """Operator-pass times at the call-graph pass's scale: its iterations over the operator pass's recorded ones
        (function mode records a window of the calls) times its pace (`pace`, else python_summary.operator_pace: the
        host slowed that pass's operators too, layers/python.pass_pace); 1 for a script run at one pace."""
        run, scale = self.run, 1.0
        if self.target.function and self.target.iters and run.instrumented_iterations:
            scale = self.target.iters / max(1, run.instrumented_iterations.n)
        if pace is None:
            pace = self.python_summary.operator_pace if self.python_summary else None
        return scale * (pace or 1.0)

    def faults_per_step(self) -> tuple[float | None, float | None]:
        """Minor page faults per step (or measured call): uninstrumented, and in the operator pass."""
        run = self.run
        steps = run.iterations.n if run.iterations else None
        recorded = self.timed_steps()
        plain = run.minor_faults / steps if run.minor_faults is not None and steps else None
        instrumented = (run.instrumented_minor_faults / recorded
                        if run.instrumented_minor_faults is not None and recorded else None)
        return plain, instrumented
