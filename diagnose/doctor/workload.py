"""The doctor's checks on what the workload did: page faults (with the allocator) and subnormal values.

Both read the report only (the uninstrumented pass's fault count and
process facts, the operator rows), so they re-run on a loaded report.

Thresholds and their sources:
- FAULT_US: a minor fault that hands out a fresh zeroed 4 KiB page costs
  about 1 µs here: 1.31 M faults took 1.32 s of the 1.50 s a 64 MiB-
  temporary loop ran with glibc (0.18 s with jemalloc tuned to reuse its
  pages, 49 k faults). The faults' share of a step is faults per step x
  FAULT_US over the median step.
- PAGE_FAULT_WARN_PCT = 5: the line a stake must reach for a medium finding
  (findings/stake.MEDIUM_MIN_PCT; a unit test ties the two). A warning
  starts the allocator trials, and only a trial that wins makes a finding,
  so the line sets what the trials cost, not what is reported; at the
  medium line no estimate that could make memory_churn medium goes
  unmeasured. At 10% (until 2026-11-28) a check short of the line left
  memory_churn its estimate for a stake: resnet_train's 5.4-8.5% at the
  low end graded it medium in the runs with no trial, and low where a trial
  ran and won weakly, so the verdict followed whether a trial ran (gallery
  set K). 1 µs a fault is a lower bound inside a model: BERT inference
  (examples/bert_infer.py, Xeon, glibc) estimated 15-21% of its step in
  5,100-6,700 faults and measured 1.23-1.28x faster with each of jemalloc,
  tcmalloc and glibc's thresholds (about 1.3 µs a fault); on an AMD EPYC
  without AMX its step takes about twice as long (63 ms) for the same 5,900
  faults: 9.3%.
  The line is judged against the share's interval from this run's noise
  (report/borderline.py): a share whose interval reaches the line warns,
  named borderline when the interval straddles it, so that the trials
  measure what the estimate cannot settle, the same way in every run (a
  check that skipped the straddling ones made BERT's 8.9-11% run nine
  trials in one run and none in the next, and measured its 1.12-1.18x win
  in three runs of five). The share is the largest of the processes that
  ran the steps without a profiler that allocates: the uninstrumented pass
  and the call-graph pass (cProfile allocates next to nothing per call);
  where those two read it further apart than the run's noise, its interval
  is their range and as far again beyond it (`two_processes`).
  glibc's heap differs from process to process: BERT's uninstrumented
  process faulted 1,946 times a step in one run and 5,500-5,900 in four,
  resnet_train's 653 to 8,985. Nor is it a constant of the process: step
  by step, resnet_train's faults switch between regimes (0, about 2,000,
  8,000-12,000 a step) that last a few steps or the whole run, and ten
  fresh processes' means over 20 steps read 917 to 8,381 (2026-11-28, Xeon;
  MALLOC_ARENA_MAX=1 the same). The trials, on nine more processes, decide;
  and once they ran, the check is read again over their baseline passes
  too (`across_processes`: the medians, the median share's interval), so a
  finding whose trials could not tell is not left one process's estimate.
  Only steps (or function-mode calls) are judged: a whole run's faults
  include setup's first touch of its data.
- MMAP_THRESHOLD_BYTES = 32 MiB: glibc's dynamic mmap threshold tops out at
  32 MiB (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), so every larger allocation
  is a fresh mmap whose pages all fault in when first written.
- SUBNORMAL_WARN_SHARE = 1%: of a tensor's nonzero values. Arithmetic on a
  subnormal operand takes a microcode assist on x86 (tens to a hundred
  cycles); a 1.5x slowdown was measured with all weights subnormal. Below
  1% the assists cannot cost much; the flush_denormal trial measures it.
"""

from __future__ import annotations

import statistics

from diagnose.doctor.environment import classify
from diagnose.report import borderline
from diagnose.report.model import BaselinePass, DoctorCheck, Fact, Report
from microbench.stats import sign_test_ci

FAULT_US = 1.0
# the change from outside the code that avoids the faults (the check's suggestion; memory_churn's, which adds the
# code's own reuse after it)
KEEP_PAGES = ("Keep freed memory for reuse instead of returning it to the kernel: an allocator that caches large "
              "blocks (jemalloc or tcmalloc via LD_PRELOAD, or glibc's MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_)")
PAGE_FAULT_WARN_PCT = 5.0  # findings/stake.MEDIUM_MIN_PCT, not imported: stake imports budget, which imports this module
MMAP_THRESHOLD_BYTES = 32 << 20
SUBNORMAL_WARN_SHARE = 0.01
PAGE_FAULTS_SOURCE = "/proc/self/stat minflt, uninstrumented pass"
CALL_GRAPH_SOURCE = "/proc/self/stat minflt, call-graph pass (it faulted more than the uninstrumented pass)"
FAULTS_PER = "minor page faults per "  # + the unit ("step", "call"): the fact the allocator trials' no_effect reads
BORDERLINE_FACT = "borderline: the estimated share's interval"
SUBNORMALS_FACT = "subnormal values"  # all values scanned below the smallest normal: flush_denormal's no_effect


def fault_pct(faults: float, seconds: float) -> float:
    """The % of `seconds` that `faults` minor faults take at FAULT_US a fault (each a fresh zeroed page)."""
    return 100.0 * faults * FAULT_US * 1e-6 / seconds


def fault_share(report: Report) -> tuple[str, float, float, float] | None:
    """(unit, minor faults per unit, median seconds of a unit, estimated % of it spent faulting in fresh pages
    at FAULT_US a fault) for the uninstrumented pass's steps, or its measured calls in function mode; None
    without them (a whole run's faults would include setup's first touch of its data)."""
    faults, it = report.run.minor_faults, report.run.iterations
    if faults is None or not it or not it.n or not it.median_s:
        return None
    per = faults / it.n
    return ("call" if report.target.mode == "function" else "step"), per, it.median_s, \
        fault_pct(per, it.median_s)


def call_graph_faults(report: Report) -> float | None:
    """Minor page faults per step (or measured call) of the call-graph pass's process: a second sample of the
    workload's heap, without a profiler's allocations (module docstring); None without that pass or its steps."""
    py = report.python_summary
    steps = report.target.iters if report.target.mode == "function" else (
        report.steps.window_steps if report.steps else None)
    if py is None or py.minor_faults is None or not steps:
        return None
    return py.minor_faults / steps


def _larger(plain: float, call_graph: float | None) -> tuple[float, str]:
    """(the larger of the uninstrumented and call-graph passes' fault counts, its source): the run without an
    allocating profiler (module docstring: glibc's heap differs from process to process)."""
    if call_graph is not None and call_graph > plain:
        return call_graph, CALL_GRAPH_SOURCE
    return plain, PAGE_FAULTS_SOURCE


def real_faults(report: Report) -> tuple[float, str] | None:
    """(minor page faults per step or measured call, which pass counted them) of the run without an allocating
    profiler: the larger of the uninstrumented and call-graph passes' (module docstring: glibc's heap differs
    from process to process); None without the uninstrumented pass's count."""
    plain = report.faults_per_step()[0]
    if plain is None:
        return None
    return _larger(plain, call_graph_faults(report))


def pass_faults(report: Report) -> tuple[float, float, int] | None:
    """(the real run's minor page faults, the operator pass's, over how many steps its profiler recorded: an
    operator's calls a step are its calls over those): per step (or measured call) where the run has steps, else
    over the whole run, which every pass measured (a script without steps); None without both counts."""
    run = report.run
    if run.iterations and run.iterations.n:
        real, instrumented, steps = real_faults(report), report.faults_per_step()[1], report.profiled_steps()
        return (real[0], instrumented, steps) if real and instrumented is not None and steps else None
    if run.minor_faults is None or run.instrumented_minor_faults is None:
        return None
    py = report.python_summary
    real, _ = _larger(float(run.minor_faults), py.minor_faults if py else None)
    return float(real), float(run.instrumented_minor_faults), 1


def _baselines(report: Report) -> list[BaselinePass]:
    """The doctor trials' baseline passes that counted their faults over steps (Doctor.baselines)."""
    return [b for b in (report.doctor.baselines if report.doctor else [])
            if b.minor_faults is not None and b.steps and b.median_s]


def judged_faults(report: Report) -> float | None:
    """The minor page faults per step (or measured call) check_page_faults judges: the median over the processes
    that ran the steps uninstrumented (`across_processes`) where the trials ran baseline passes, else the larger of
    the uninstrumented and call-graph passes' (`real_faults`); None without the uninstrumented pass's count."""
    judged = workload_faults(report)
    return judged[0] if judged else None


def workload_faults(report: Report) -> tuple[float, int] | None:
    """(`judged_faults`, over how many processes): the workload's faults per step, one number for the doctor's check
    and the step budget's allocator slice (budget.of)."""
    real = real_faults(report)
    if real is None:
        return None
    per = _per_process(real[0], _baselines(report))
    return statistics.median(per), len(per)


def _per_process(per: float, runs: list[BaselinePass]) -> list[float]:
    """Faults per step of each process that ran the steps uninstrumented: the first (`per`), then each baseline."""
    return [per] + [b.minor_faults / b.steps for b in runs]


def across_processes(report: Report, per: float, share: float) -> tuple[float, float, float, float, int] | None:
    """(minor faults per step or call, % of it faulting, that share's low and high end, processes) over the
    uninstrumented pass's process (`per` and `share`: its reading, or the call-graph pass's count where larger)
    and the doctor trials' baseline passes (Doctor.baselines: the same window, each a process of its own): the
    medians, and the median share's 95% sign-test interval (the shares' range under the 6 processes it needs).
    None without baseline passes. glibc's heap and the CPU under the process differ from one process to the
    next (module docstring): one process's share put examples/transpose_copy.py's 6,700-8,100 faults a step at
    4.4-6.9% of it over five runs on a 2-CPU AMD EPYC (2026-12-02), medium or low by the run; over ten
    processes (their faults 4,064-6,931 a step, their steps 80-131 ms) the median read 5.3-5.7% in three runs
    (2026-12-03)."""
    runs = _baselines(report)
    if not runs:
        return None
    faults = _per_process(per, runs)
    shares = [share] + [fault_pct(f, b.median_s) for f, b in zip(faults[1:], runs)]
    ci = sign_test_ci(shares)
    low, high = (ci[0], ci[1]) if ci else (min(shares), max(shares))
    return statistics.median(faults), statistics.median(shares), low, high, len(shares)


def two_processes(share: float, apart: float, low: float) -> tuple[float, float]:
    """The interval of the fault share before the trials ran, where the two processes that ran the steps without an
    allocating profiler read it `apart` points apart, wider than the run's noise (`low` its low end): their range,
    extended by itself on either side, the next process as far beyond them as they are apart (`share`: the larger).
    glibc's heap differs from process to process by more than a step's noise says: examples/transpose_copy.py's
    processes faulted 1,430-8,160 times a step on a 2-CPU AMD EPYC (2026-12-05, gallery set Z), ten of them 4,064 at
    the median; the one run of five whose two passes read 2,845 and 1,430 (3.4%, 3.9% at the run's noise) started
    no allocator trial, so it measured nothing where the four others' trials measured 1.05-1.11x."""
    return min(low, max(0.0, share - 2.0 * apart)), share + apart


def check_page_faults(report: Report) -> DoctorCheck:
    measured = fault_share(report)
    if measured is None:
        return DoctorCheck("page_faults", "skipped",
                           "No page faults per step: the run has no steps (its faults would include setup's first "
                           "touch of its data, which no allocator avoids); diagnose.mark_step() in the loop gives "
                           "them.")
    unit, per, median_s, share = measured
    process = report.doctor.process if report.doctor else None
    allocator = classify(process.libraries).allocator if process and process.libraries else None
    # the largest of the processes that ran the steps without an allocating profiler (module docstring)
    plain, other = per, call_graph_faults(report)
    per, source = _larger(plain, other)
    share = fault_pct(per, median_s)
    first, first_source = per, source
    # the line against the share's interval: over the processes that ran the steps uninstrumented where the trials
    # ran some (`across_processes`), else from this run's noise (report/borderline.py); a share whose interval
    # reaches the line warns, borderline when it straddles, and the trials measure it, in every run alike
    spread = across_processes(report, per, share)
    if spread is None:
        low, high = borderline.interval(share, borderline.noise(report))
        where_from = "this run's noise (report/borderline.py)"
        apart = fault_pct(abs(plain - other), median_s) if other is not None else 0.0
        if apart > high - share:  # two processes that read the heap apart: a third can land as far beyond them
            low, high = two_processes(share, apart, low)
            where_from = (f"the uninstrumented and call-graph passes' {plain:,.0f} and {other:,.0f} faults a {unit}, "
                          f"a third process as far beyond them")
    else:
        per, share, low, high, n = spread
        where_from = f"the median's 95% interval over {n} processes"
        source = f"median over {n} processes: the uninstrumented pass and the trials' baseline passes"
    rate_of = f", over the uninstrumented pass's median {unit}" if spread else ""
    facts = [Fact(f"{FAULTS_PER}{unit}", round(per), "faults", source),
             Fact("minor page faults per second", round(per / median_s), "faults/s", source + rate_of),
             Fact(f"estimated share of the {unit} spent faulting in fresh pages", round(share, 1), "%",
                  f"{FAULT_US:g} µs per fault (diagnose/doctor/workload.py)" + (f", {source}" if spread else ""))]
    if spread is not None:
        facts += [Fact(f"that share over the {n} processes", f"{low:.1f}-{high:.1f}", "%", where_from),
                  Fact(f"first process: faults per {unit}", round(first), "faults", first_source)]
    facts.append(Fact("allocator", allocator, "", "/proc/self/maps" if allocator else "not read"))
    if other is not None:
        facts += [Fact(f"uninstrumented pass: faults per {unit}", round(plain), "faults", PAGE_FAULTS_SOURCE),
                  Fact(f"call-graph pass: faults per {unit}", round(other), "faults",
                       "/proc/self/stat minflt, call-graph pass")]
    big = sorted((r for r in report.operators if r.calls and r.cpu_memory_bytes / r.calls >= MMAP_THRESHOLD_BYTES),
                 key=lambda r: -r.cpu_memory_bytes)[:3]
    for r in big:
        facts.append(Fact(f"{r.name} {r.input_shapes} at {r.source or 'an unknown line'}",
                          round(r.cpu_memory_bytes / r.calls / (1 << 20), 1), "MiB fresh per call",
                          "operator pass (self CPU memory)"))
    over = f" (median of {spread[4]} processes)" if spread else ""
    if high < PAGE_FAULT_WARN_PCT:
        return DoctorCheck("page_faults", "ok", f"{per:,.0f} minor page faults per {unit}{over}: about {share:.1f}% "
                           f"of it at {FAULT_US:g} µs a fault.", facts)
    where = (f": {big[0].name} outputs of {big[0].cpu_memory_bytes / big[0].calls / (1 << 20):.0f} MiB at "
             f"{big[0].source}" if big and big[0].source else "")
    if low < PAGE_FAULT_WARN_PCT:
        facts.append(Fact(BORDERLINE_FACT, f"{low:.1f}-{high:.1f}", "%", f"{where_from}: "
                          f"the {PAGE_FAULT_WARN_PCT:g}% line inside it, so the trials measure it"))
    summary = (f"{per:,.0f} minor page faults per {unit}{over} with "
               f"{allocator or 'the default'} malloc (about {share:.0f}% of the {unit} at {FAULT_US:g} µs a fault): "
               f"fresh pages for large temporaries{where}")
    suggestion = f"{KEEP_PAGES}, or reuse the buffers in code (out= arguments, in-place operators)."
    return DoctorCheck("page_faults", "warn", summary, facts, suggestion=suggestion,
                       at_stake_pct=round(min(share, 100.0), 1))


def check_denormals(report: Report) -> DoctorCheck:
    process = report.doctor.process if report.doctor else None
    if process is None:
        return DoctorCheck("denormals", "skipped", "The uninstrumented pass wrote no process readings.")
    # the uninstrumented pass's scan (the outermost module's weights and inputs) and the operator pass's
    # (every call site's inputs in the step before the window), each with its own source
    scans = [(s, "process scan") for s in process.subnormals] + \
        [(s, "operator pass scan") for s in process.operator_inputs]
    scope = "; ".join(x for x in (process.subnormal_scope if process.subnormals else None,
                                  process.operator_inputs_scope if process.operator_inputs else None) if x)
    if not scans:
        why = "; ".join(x for x in (process.subnormal_scope, process.operator_inputs_scope) if x)
        return DoctorCheck("denormals", "skipped", f"Nothing to scan: {why or 'no tensors'}.")
    facts = [Fact("tensors scanned", len(scans), "", scope),
             Fact("values scanned", sum(s.scanned for s, _ in scans), "values", "strided sample of large tensors"),
             Fact(SUBNORMALS_FACT, sum(s.subnormal for s, _ in scans), "values", "below torch.finfo(dtype).tiny")]
    flagged = sorted(((s, src) for s, src in scans if s.nonzero and s.subnormal / s.nonzero >= SUBNORMAL_WARN_SHARE),
                     key=lambda ss: -ss[0].subnormal)
    for s, src in flagged[:3]:
        facts.append(Fact(f"{s.tensor} {s.shape} {s.dtype}", round(100.0 * s.subnormal / s.nonzero, 1),
                          "% of nonzero values subnormal", src))
    if not flagged:
        return DoctorCheck("denormals", "ok", f"No tensor with subnormal values among the {len(scans)} "
                                              f"scanned ({scope}).", facts)
    worst = flagged[0][0]
    summary = (f"{len(flagged)} tensor(s) hold subnormal values, e.g. {worst.tensor} {worst.shape}: "
               f"{100.0 * worst.subnormal / worst.nonzero:.0f}% of its nonzero values; arithmetic on them "
               "takes the CPU's slow path")
    suggestion = ("Call torch.set_flush_denormal(True) once at start-up (subnormals are then treated as zero; "
                  "check that the results still match), or fix what drives the values that small "
                  "(initialisation scale, weight decay, a missing normalisation).")
    return DoctorCheck("denormals", "warn", summary, facts, suggestion=suggestion)
