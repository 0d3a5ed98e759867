"""The step budget: where one step's time goes, slice by measured slice, and what is left unexplained.

`of(report)` -> model.StepBudget, a pure function of the report (it re-runs on a loaded one). The ground truth is
the uninstrumented pass's median step (or call; or the whole measured run when the script has no steps, or when
--full-run recorded it whole, set-up included). Each
slice is measured from the pass that sees it, as a share of that pass's window (passes run at different moments
on a shared machine, and a window's mean step is not its median) or as counts per step x a cost this machine's
probe measured (model.CallCosts; the efficiency layer's cached peaks), and carried to the median step:

- allocator: minor page faults per step (the workload's: the median over the processes that ran the steps
  uninstrumented, this run's and the doctor trials' baselines, as the doctor's page_faults check reads them:
  doctor/workload.workload_faults) x (a fresh page's measured fault + the cost of giving it back:
  CallCosts.page at the run's intra-op threads). In a step that does not grow each fresh page is given back
  once (glibc munmaps a freed block over its mmap threshold). The operator pass's memory records say which share
  of the bytes was freed inside operators (that time is in the kernels) and which between them, when Python
  dropped a tensor's last reference (cProfile booked that to the Python line: it leaves the python slice, by the
  call-graph pass's own fault count where it was read).
  The count is one process's, and glibc's heap differs from process to process: when the doctor's allocator
  trial (an interleaved A/B on these steps) measured a larger saving, the slice is that measured saving, taken
  out of the kernels, so the page_faults finding's measured stake fits inside it.
- kernels: the operator pass's self time, less the profiler's fixed part of every operator call
  (profiler_self_us x calls) and less that pass's own allocator time, as a share of that pass's step without
  its allocator time and without what recording added between operators (its user-line labels' self time less
  the Python, dispatch and frees measured there, at least profiler_call_us per recorded event); carried to the
  step without its allocator time. The top kernels are listed with their line and module.
- dispatch: calling operators from Python: the operator pass's torch calls from Python x dispatch_us, plus the
  ones that recorded autograd x the extra autograd_dispatch_us - dispatch_us.
- python: the call-graph pass's Python self time a step (the user's functions and other Python code; operator work
  reached through C slots already moved out by layers/python.py), less what cProfile added (cprofile_call_us a
  call), less the data slice's share of it, less the blocks freed between operators, less the dispatch of the
  torch calls made through a C slot (`a - b`, `x[i]`: Autograd.slot_calls), which cProfile sees no call for and
  the dispatch slice counts. Carried to the step by the pace of the two passes' median steps (a share of the
  pass's mean step would take its stalls as everyone's: in examples/numpy_beside_torch.py a few steps stall 3-5x
  on torch's threads waiting beside numpy's pool, and numpy's steady work read 29% of the step where a pass had
  more of them, 42-44% where it had fewer); the pass's mean step where its steps were not kept.
- native: C built-ins outside torch (numpy, PIL, tokenizers, ...) and numerical packages' Python code, by
  library, corrected likewise; with numpy's array operations that ran through C slots in the user's own lines
  (`raw @ projection`: cProfile sees no call there), which the call-graph pass's sampling of the user's own time
  found at lines with no torch operator (layers/python.py OwnTimeSampler, PythonFunction.numpy_s).
- data: time inside DataLoader iterators (the step clock's data wait).
- waiting: blocking built-ins cProfile saw (sleep, locks, pipe and socket reads, waiting for a child).
- unexplained: the step less all of the above, always shown; negative when the slices overlap (then the
  slices are over-counted by that much, and the budget says so).

Without call costs (no efficiency layer, or a cache from before they were measured) the per-call corrections
use DEFAULT_COSTS and a page costs doctor/workload.FAULT_US, and the budget says so. A slice without its pass (no operator or call-graph pass) is absent,
and its time is in `unexplained`.
"""

from __future__ import annotations

import re

from diagnose.doctor.workload import FAULT_US, workload_faults
from diagnose.report.borderline import RUN_NOISE_MIN
from diagnose.render import fmt
from diagnose.report.model import BudgetItem, BudgetSlice, CallCosts, Report, StepBudget

# per-call costs when this machine's probe has none: the medians measured on a 2-CPU AMD EPYC (2026-11-25)
DEFAULT_COSTS = CallCosts(dispatch_us=1.3, autograd_dispatch_us=1.8, profiler_self_us=0.7, cprofile_call_us=0.13,
                          profiler_call_us=1.3, method="not measured on this machine: a 2-CPU AMD EPYC's medians")
TOP = 5  # contributors listed per slice
ORDER = ("kernels", "dispatch", "python", "native", "data", "allocator", "waiting", "unexplained")
LIBRARIES = ("numpy", "scipy", "PIL", "pandas", "tokenizers", "cv2", "sklearn", "librosa", "soundfile", "json",
             "pickle", "re", "zlib", "io")
_LIBRARY = re.compile(r"\b(" + "|".join(re.escape(n) for n in LIBRARIES) + r")\b")


def _library(function: str, location: str = "~") -> str | None:
    """The library outside torch a function belongs to: a C built-in by cProfile's name ("<built-in method
    numpy.core...>", "<method 'astype' of 'numpy.ndarray' objects>"), Python code by its file (numpy's FFT
    wrappers run pocketfft through C slots cProfile does not see, so their self time is numpy's C code);
    None for anything else (torch's Python layers, the standard library, the user's code)."""
    if location != "~":
        m = re.search(r"site-packages/([A-Za-z_][\w]*)/", location) or re.match(r"([A-Za-z_]\w*)/", location)
        return m.group(1) if m and m.group(1) in LIBRARIES else None
    m = _LIBRARY.search(function)
    return m.group(1) if m else None


def _unit(report: Report) -> tuple[str, float, int] | None:
    """(unit, its median seconds uninstrumented, how many the passes measured) or None without a timing. With
    --full-run every pass recorded the whole script, set-up included: the unit is the run, whose wall time every
    slice is measured over (a share of it carried to one median step would put set-up's Python and operators in a
    step)."""
    it = report.run.iterations
    if report.steps is not None and report.steps.full_run and report.target.mode == "script" and report.run.wall_s:
        return "run", report.run.wall_s, 1
    if it and it.n and it.median_s:
        return ("call" if report.target.mode == "function" else "step"), it.median_s, it.n
    if report.run.wall_s:
        return "run", report.run.wall_s, 1
    return None


def call_costs(report: Report) -> CallCosts:
    """This machine's probed per-call and per-page costs, else DEFAULT_COSTS."""
    peaks = report.efficiency.peaks if report.efficiency else None
    return peaks.call_costs if peaks and peaks.call_costs else DEFAULT_COSTS


def page_costs(report: Report, costs: CallCosts | None = None) -> tuple[float, float, str]:
    """(µs a fresh page costs when first written, µs to give it back, how they were obtained) at the run's
    intra-op threads: this machine's probe, else doctor/workload.FAULT_US for both (measured once as a whole)."""
    page = (costs or call_costs(report)).page(report.machine.intra_op_threads)
    if page is not None:
        return page.fault_us, page.free_us, (f"{page.fault_us:g} µs a fault and {page.free_us:g} µs a page given "
                                             f"back, this machine's probe at {page.threads} thread"
                                             f"{'s' if page.threads != 1 else ''}")
    return FAULT_US, 0.0, f"{FAULT_US:g} µs a fault with its free (not measured on this machine)"


def of(report: Report) -> StepBudget | None:
    unit = _unit(report)
    if unit is None:
        return None
    name, step_s, n = unit
    costs = call_costs(report)
    notes: list[str] = []
    if name == "run" and report.steps is not None and report.steps.full_run:
        notes.append("--full-run: every pass recorded the whole script, set-up included, so this is the whole run's "
                     "budget (set-up's Python and operators are in their slices), not one step's")
    slices: dict[str, BudgetSlice] = {}
    # Every slice is measured as a share of its own pass's window (or as counts per step x a measured cost) and
    # carried over to the uninstrumented median step: the passes run at different moments on a shared machine (a
    # share survives a drift in pace, a time does not), and the window's mean step is not its median (a step that
    # waited for data, a collection): `scale` turns the uninstrumented window's mean step into its median.
    window_s = report.run.wall_s if name != "run" else step_s
    scale = step_s * n / window_s if window_s else 1.0

    # The allocator: each fresh page is faulted in where it is first written (inside an operator, mostly), and in
    # a step that does not grow, given back once (glibc munmaps a freed block over its mmap threshold): inside an
    # operator, or between operators when Python drops a tensor's last reference. The operator pass's memory
    # records say which share of the bytes were freed where.
    fault_us, free_us, page_basis = page_costs(report, costs)
    plain_faults, op_faults = report.faults_per_step()
    where = "uninstrumented pass"
    if name == "run":
        plain_faults, op_faults = report.run.minor_faults, report.run.instrumented_minor_faults
    elif plain_faults is not None and (judged := workload_faults(report)) is not None and judged[1] > 1:
        # the workload's count, as the doctor's page_faults check judges it: glibc's heap differs from process to
        # process, and one process's count capped memory_churn's stake (the check's median over ten processes)
        # at its own 2.8% of the step (resnet_train: 910-9,597 faults a step by the run, gallery set AB)
        plain_faults, where = judged[0], (f"the median over {judged[1]} processes that ran the steps "
                                          "uninstrumented: this run's and the doctor trials' baselines")
    mem = report.operator_summary.memory if report.operator_summary else None
    freed_out = (1.0 - mem.freed_in_operators_bytes / mem.freed_bytes
                 if mem and mem.freed_bytes and mem.freed_in_operators_bytes is not None else 0.0)
    fault_s = free_s = free_in_s = free_out_s = 0.0
    if plain_faults is not None:
        fault_s = plain_faults * fault_us * 1e-6 * scale
        free_s = plain_faults * free_us * 1e-6 * scale
        free_in_s, free_out_s = free_s * (1 - freed_out), free_s * freed_out
        slices["allocator"] = BudgetSlice(
            "allocator", fault_s + free_s,
            f"{plain_faults:,.0f} minor page faults a {name} (fresh pages the allocator hands out, {where}) x "
            f"({page_basis})" + (f"; {100 * freed_out:.0f}% of the bytes were freed between operators "
                                         "(Python dropping a tensor's last reference), the rest inside them"
                                         if free_s else "") + (
                "; the memory section (report.memory) has the live bytes per step, their growth and what keeps "
                "them" if report.memory else ""))
    trial = report.doctor.best_win("page_faults") if report.doctor else None
    saved = (trial.saved_pct or 0.0) / 100.0 if trial else 0.0
    if saved * step_s > fault_s + free_s:
        # An allocator change measured on these steps (interleaved rounds, diagnose/doctor/trials.py) saved more
        # than the faults' estimate: the count is one process's (glibc's heap differs from process to process:
        # conv_nchw's faulted 8 k times a step in one run and 28 k in the trials beside it) at a probe's cost a
        # page. What the trial saved is allocator time, measured: the slice is at least that, taken out of the
        # kernels, where those faults land.
        extra = saved * step_s - (fault_s + free_s)
        fault_s += extra
        slices.setdefault("allocator", BudgetSlice("allocator", 0.0, "no fault count"))
        slices["allocator"].s += extra
        slices["allocator"].basis += (
            f"; at least the {100 * saved:.3g}% of the {name} that {trial.name} saved, measured (1 - 1/"
            f"{trial.speedup:g} over {trial.rounds} interleaved rounds), more than that estimate")

    ops = report.operator_summary
    op_it = report.run.instrumented_iterations
    op_n = 1 if name == "run" else (op_it.n if op_it and op_it.n else n)  # the pass's span holds op_n units
    autograd = report.autograd
    if autograd and autograd.calls:
        s = (autograd.calls * costs.dispatch_us
             + autograd.recording_calls * max(0.0, costs.autograd_dispatch_us - costs.dispatch_us)) * 1e-6 / op_n
        slices["dispatch"] = BudgetSlice(
            "dispatch", s * scale, f"{autograd.calls / op_n:,.0f} torch calls from Python a {name} x "
            f"{costs.dispatch_us:g} µs ({autograd.recording_calls / op_n:,.0f} recording autograd, "
            f"{costs.autograd_dispatch_us:g} µs)")

    data_s = 0.0
    if report.steps and report.steps.data_wait_s and report.steps.window_steps:
        data_s = report.steps.data_wait_s / (1 if name == "run" else report.steps.window_steps) * scale
        slices["data"] = BudgetSlice("data", data_s, "time inside DataLoader iterators (the step clock)",
                                     [BudgetItem(label=report.steps.data_wait_at or "DataLoader", s=data_s,
                                                 location=report.steps.data_wait_at)] if data_s else [])

    py = report.python_summary
    if py and py.total_s:
        split = py.split_s
        py_n = 1 if name == "run" else (report.steps.window_steps if report.steps and report.steps.window_steps
                                         else (report.target.iters or n))
        timed = split.user + split.library + split.builtin
        added = min(timed, py.calls * costs.cprofile_call_us * 1e-6)
        # that pass's time a step, carried over to the uninstrumented median step by the two passes' pace: the
        # ratio of their typical steps, each pass's median (PythonSummary.steps), where recorded; else its mean
        py_step = (py.steps.median_s if py.steps and py.steps.n >= 4 and name != "run"
                   else py.wall_s / py_n if py.wall_s else None)
        py_pace = step_s / py_step if py_step else 1.0
        keep = (timed - added) / timed * py_pace if timed else 0.0
        # outside torch: C built-ins (split.builtin), the library code of numerical packages (numpy, PIL, ...) by
        # their files (split.library: moved here), and numpy's array operations in user functions' own time (the
        # python layer moved them to split.builtin: PythonFunction.numpy_s), by library
        by_lib: dict[str, float] = {}
        callers: dict[str, tuple[float, str]] = {}  # library -> (its largest piece's s, where it was called from)
        in_libraries = 0.0  # split.library's part
        for f in report.python_hotspots:
            lib = _library(f.function, f.location) if f.kind in ("builtin", "library") else None
            s, at = f.self_s, f.called_from
            if f.kind == "user" and f.numpy_s:
                lib, s, at = "numpy", f.numpy_s, f"{f.function} at {f.numpy_at}"
            elif lib is None and f.kind != "builtin":
                continue
            key = lib or "other built-ins"
            by_lib[key] = by_lib.get(key, 0.0) + s
            in_libraries += s if f.kind == "library" else 0.0
            if lib and at and s > callers.get(lib, (0.0, ""))[0]:
                callers[lib] = (s, at)
        python_s = max(0.0, split.user + split.library - in_libraries) * keep / py_n
        native_s = (split.builtin + in_libraries) * keep / py_n
        wait_s = split.wait * py_pace / py_n
        if data_s:  # with num_workers=0 the loading runs inside the iterator: it is the data slice's time
            pool = python_s + native_s + wait_s
            share = min(1.0, data_s / pool) if pool else 0.0
            python_s, native_s, wait_s = python_s * (1 - share), native_s * (1 - share), wait_s * (1 - share)
            notes.append("the data slice's time was taken out of python, native and waiting in proportion: a "
                         "DataLoader without workers loads inside its iterator, on this thread")
        # blocks freed between operators were freed by the Python line that dropped them: cProfile booked that
        # time to the line's function, so it leaves the Python slice for the allocator's
        # the call-graph pass's own frees, from its own fault count where it was read: glibc's heap differs from
        # process to process (allocation_churn's python slice came out 0.9-13% by run from the baseline's count)
        py_free_out_s = (py.minor_faults / py_n * free_us * 1e-6 * freed_out * py_pace
                         if py.minor_faults is not None and py_n else free_out_s)
        freed_python = min(python_s, py_free_out_s)
        # torch calls made through a C slot (a - b, x[i], out[i] = v) are no calls to cProfile: their dispatch is
        # in the calling function's self time, and the dispatch slice counts it already (a row loop's Python and
        # dispatch summed to 126% of its run)
        slot_calls = autograd.slot_calls / op_n if autograd and autograd.slot_calls else 0.0
        slot_s = min(python_s - freed_python, slot_calls * costs.dispatch_us * 1e-6 * scale)
        python_kept = (python_s - freed_python - slot_s) / python_s if python_s else 0.0
        python_s -= freed_python + slot_s
        basis = (f"the call-graph pass's self time a {name}, less cProfile's {costs.cprofile_call_us:g} µs on each "
                 f"of its {py.calls:,} calls, x {py_pace:.3g} (this {name} over that pass's "
                 f"{'median' if py.steps and py.steps.n >= 4 and name != 'run' else 'mean'} {name})")
        users = [f for f in report.python_hotspots if f.kind == "user"
                 or (f.kind == "library" and _library(f.function, f.location) is None)]
        # what cProfile measured before the operators and frees were moved out of it: each moved term is known to
        # the run-to-run noise, so the rest is known to that noise of the whole (allocation_churn's 207 ms of
        # Python less 125 ms of operators and 62 ms of frees left 0-23 ms from run to run)
        gross_s = ((split.user + split.library + (py.hidden_operator_s or 0.0) + (py.numpy_s or 0.0))
                   * keep / py_n)
        slices["python"] = BudgetSlice(
            "python", python_s, basis + " (your functions and other Python code)" + (
                f", less the {1e3 * freed_python:.3g} ms of blocks freed between operators (the allocator's)"
                if freed_python else "") + (
                f", less the {1e3 * slot_s:.3g} ms of dispatch of the {slot_calls:,.0f} torch calls a {name} made "
                "by operators and indexing (a - b, x[i]): cProfile sees no call there and books them to the calling "
                "function; they are the dispatch slice's" if slot_s else ""),
            [BudgetItem(label=f.function, s=f.python_s * keep / py_n * python_kept,
                        location=f.location if f.kind == "user" else None)
             for f in sorted(users, key=lambda f: -f.python_s)[:TOP]],
            noise_share=round(RUN_NOISE_MIN * gross_s / step_s, 4) if gross_s > 1.01 * python_s else None)
        slices["native"] = BudgetSlice(
            "native", native_s, basis + " (outside torch: numerical libraries' code, numpy, PIL, tokenizers, ..., "
            "and other C built-ins)",
            [BudgetItem(label=lib, s=s * keep / py_n, location=callers[lib][1] if lib in callers else None)
             for lib, s in sorted(by_lib.items(), key=lambda kv: -kv[1])[:TOP]])
        if split.wait:
            slices["waiting"] = BudgetSlice("waiting", wait_s, "blocking built-ins in the call-graph pass: sleep, "
                                            "locks, pipe and socket reads, waiting for a child")
    op_span, _ = report.recorded_span()
    if ops and ops.total_self_cpu_us and report.operators and op_span:
        # the operator pass's own faults (the profiler's records add their own) land in its operators: its
        # kernels' share is of that pass's step without its allocator time, carried to this step without ours
        op_alloc_in = (op_faults or 0.0) * (fault_us + free_us * (1 - freed_out)) * 1e-6
        op_alloc = (op_faults or 0.0) * (fault_us + free_us) * 1e-6
        # the target's own process: the processes it forked run their operators (and their events and labels)
        # beside its steps, not in them
        mains = [(r, *r.in_main_process()) for r in report.operators]
        all_us = sum(r.self_cpu_us for r in report.operators)
        main_share = sum(us for _, us, _ in mains) / all_us if all_us else 1.0
        calls = sum(n for _, _, n in mains)
        # what recording added to that pass's step, between operators: its user-line labels' self time (the
        # recorder's work, and the Python, dispatch and frees of the line, which the other slices measured here),
        # and at least the recorder's measured cost per call for each event it recorded
        events = max(calls, round((ops.events or 0) * main_share))
        between = sum(slices[k].s for k in ("python", "dispatch") if k in slices) + free_out_s
        recording = max(events * (costs.profiler_call_us or 0.0) * 1e-6 / op_n,
                        (ops.attribution_overhead_us or 0.0) * main_share * 1e-6 / op_n - between)
        op_step = op_span / op_n
        base_op, base = op_step - op_alloc - recording, step_s - (fault_s + free_in_s + free_out_s)

        def kernel(self_us: float, calls: int, faults_s: float = 0.0) -> float:
            """Seconds of a step in the kernels: operator self time less the profiler's fixed part per call, less
            the allocator's time inside them, as a share of the operator pass's step without its allocator time."""
            own = max(0.0, (self_us - calls * costs.profiler_self_us) * 1e-6 / op_n - faults_s)
            return own / base_op * max(0.0, base) if base_op > 0 else 0.0

        main_us = ops.total_self_cpu_us * main_share
        raw_s = max(0.0, (main_us - calls * costs.profiler_self_us) * 1e-6 / op_n)
        kernel_s = kernel(main_us, calls, min(op_alloc_in, raw_s))
        kept = kernel_s / (raw_s / base_op * max(0.0, base)) if raw_s and base_op > 0 and base > 0 else 0.0
        items = [BudgetItem(label=f"{r.name} {fmt.shapes(r.input_shapes, limit=1 << 16)}",
                            s=kernel(us, n) * kept, op=r.name, module=r.module, location=r.source)
                 for r, us, n in sorted(mains, key=lambda m: -m[1])[:TOP] if us > 0]
        slices["kernels"] = BudgetSlice(
            "kernels", kernel_s,
            "operator self time in the operator pass"
            + (" (the target's own process: its forked processes run beside its steps)" if main_share < 1.0 else "")
            + f", less the profiler's fixed {costs.profiler_self_us:g} µs of "
            f"each of its {calls:,} calls and less that pass's own allocator time ({op_faults or 0:,.0f} faults a "
            f"{name}), as a share of its step without that time and without what recording added "
            f"({1e3 * recording:.3g} ms a {name}: its line labels' self time less the Python, dispatch and frees "
            f"measured between operators, at least {costs.profiler_call_us or 0:g} µs for each of its "
            f"{events / op_n:,.0f} events), "
            f"x {max(0.0, base) / base_op if base_op > 0 else 0:.3g} to this step without our allocator time", items)
    if not slices:
        return None
    explained = sum(s.s for s in slices.values())
    rest = step_s - explained
    slices["unexplained"] = BudgetSlice(
        "unexplained", rest, "the step less every measured slice" + (
            "; negative: the slices overlap or over-count by that much" if rest < 0 else ""))
    for s in slices.values():
        s.share = round(s.s / step_s, 4)
        s.s = round(s.s, 9)
        for item in s.items:
            item.share = round(item.s / step_s, 4)
            item.s = round(item.s, 9)
    missing = [k for k in ("kernels", "python") if k not in slices]
    if missing:
        notes.append(f"no {' or '.join(missing)} slice: {'the operator pass' if 'kernels' in missing else ''}"
                     f"{' and ' if len(missing) == 2 else ''}{'the call-graph pass' if 'python' in missing else ''} "
                     "did not run, so that time is in unexplained")
    return StepBudget(unit=name, step_s=round(step_s, 9), slices=[slices[k] for k in ORDER if k in slices],
                      unexplained_share=slices["unexplained"].share, costs=costs.method or "measured by the probe",
                      notes=notes)


# which slice a finding's time is part of: its stake can never be larger than that slice
SLICE_OF = {"hot_operator": ("kernels",), "low_efficiency": ("kernels",), "copy_overhead": ("kernels",),
            "sequential_operator": ("kernels",), "dtype": ("kernels",), "input_growth": ("kernels",),
            "python_overhead": ("python", "dispatch"), "outside_torch": ("native",), "memory_churn": ("allocator",), "page_faults": ("allocator",),
            "data_wait": ("data",), "autograd_in_inference": ("kernels", "dispatch")}


# kinds whose time is the whole of their slice (not one operator among the kernels): bounded by it, the stake is
# that measured slice, no longer an upper-bound estimate
SLICE_IS_STAKE = {"python_overhead", "page_faults", "memory_churn", "data_wait"}


def cap_pct(budget: StepBudget | None, kind: str) -> tuple[float, str, float | None] | None:
    """The largest stake (% of the step) a finding of this kind can claim, the slices it is bounded by, and the
    half-width (% of the step) of that bound where a slice has its own (BudgetSlice.noise_share), else None."""
    names = SLICE_OF.get(kind)
    if budget is None or not names:
        return None
    have = [s for s in budget.slices if s.name in names]
    if not have:
        return None
    noise = [s.noise_share for s in have if s.noise_share is not None]
    return (100.0 * max(0.0, sum(s.share for s in have)), " + ".join(s.name for s in have),
            100.0 * sum(noise) if noise else None)
