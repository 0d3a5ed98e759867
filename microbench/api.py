"""Library API: cases -> measurements -> Results. The CLI is a thin layer over this.

`from_report(path, ...)` and `run(op, shapes, ...)` return a `Results`;
`benchmark(cases, threads, ...)` is the loop both share. See the package
docstring for the JSON they produce.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable

from microbench import callgrind as cg
from microbench import fuzz as fz
from microbench import reproducer
from microbench.cases import (
    CannotRebuild,
    Case,
    build_case,
    cases_from_report,
    expand_shapes,
    namespace,
    parse_shapes,
    spec_dtypes,
    split_op_name,
    validate,
)
from microbench.errors import UsageError
from microbench.machine import cpu_model, cpu_snapshot, describe, others_cpus, usable_cpus
from microbench.measure import (
    AUTORANGES,
    BESIDE_TURN_S,
    TURN_S,
    Budget,
    Timing,
    interleaved,
    per_measurement_time,
    reference_side,
)
from microbench.results import FUZZ_RULE, Results, Row, read_json

Progress = Callable[[str], None]

DEFAULT_TOP = 5
DEFAULT_BUDGET_S = 60.0
DEFAULT_MAX_RUN_TIME_S = 2.0
DEFAULT_THRESHOLD = 0.1


def _quiet(_msg: str) -> None:
    pass


def stderr_progress(msg: str) -> None:
    print(f"microbench: {msg}", file=sys.stderr, flush=True)


def default_threads(machine: dict | None = None) -> list[int]:
    """1, the configured intra-op count and the usable CPUs (from the report's machine when given)."""
    import torch

    machine = machine or {}
    intra = machine.get("intra_op_threads") or torch.get_num_threads()
    usable = machine.get("usable_cpus") or usable_cpus()
    return sorted({1, int(intra), int(usable)})


def check_threads(threads: list[int]) -> list[int]:
    if not threads or any((not isinstance(t, int)) or t < 1 for t in threads):
        raise UsageError(f"thread counts must be integers >= 1, got {threads}")
    return sorted(set(threads))


def _row(case: Case, t: Timing) -> Row:
    s = t.summary
    med_us, iqr_us = s.median * 1e6, s.iqr * 1e6
    return Row(
        op=case.op, overload=case.overload, input_shapes=case.input_shapes, dtypes=case.dtypes,
        contiguous=case.contiguous, strides=case.strides, layout=case.layout, threads=t.threads,
        median_us=round(med_us, 4), iqr_us=round(iqr_us, 4), runs=len(t.times_s), number_per_run=t.number_per_run,
        noise_pct=round(100.0 * s.noise, 3), noisy=s.noisy,
        flops=case.flops, gflops_per_s=_sig(case.flops / (s.median * 1e9)) if case.flops else None,
        bytes=case.bytes, gbytes_per_s=_sig(case.bytes / (s.median * 1e9)) if case.bytes else None,
        source=case.source, self_pct=case.self_pct, assumed_args=dict(case.assumed_args), stmt=case.stmt(),
        times_us=[round(x * 1e6, 4) for x in t.times_s], turns_us=[round(x * 1e6, 4) for x in t.turns_s])


CONTENTION_SLACK_CPUS = 0.2   # background noise (kernel threads, editors) that is not contention


def is_contended(others: float, threads: int, usable: int) -> bool:
    """Others used more CPU than the usable CPUs our `threads` left free."""
    return others > max(0, usable - threads) + CONTENTION_SLACK_CPUS


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def fill_speedups(rows: list[Row]) -> None:
    base = next((r for r in rows if r.threads == 1), None)
    for r in rows:
        if base is None or r.median_us <= 0:
            continue
        speedup = base.median_us / r.median_us
        r.speedup_vs_1_thread = round(speedup, 3)
        r.parallel_efficiency = round(speedup / r.threads, 3)


def _skip(case: Case, threads: int | None, reason: str) -> dict:
    return {"op": case.op, "input_shapes": case.input_shapes, "dtypes": case.dtypes, "source": case.source,
            "self_pct": case.self_pct, "threads": threads, "reason": reason}


def _measured_text(rows: list[Row]) -> str:
    import torch

    if not rows:
        return ""
    text = ", ".join(f"{r.threads} thread(s) {r.median_us:.2f} us (IQR {r.noise_pct:.1f}%"
                     + (", contended" if r.contended else "") + ")" for r in rows)
    return f"{text}\n           on {cpu_model()}, torch {torch.__version__}"


def benchmark(cases: list[Case], threads: list[int], *, budget: Budget, threshold: float = DEFAULT_THRESHOLD,
              max_run_time: float = DEFAULT_MAX_RUN_TIME_S, callgrind: bool = False,
              reproducers: str | None = None, progress: Progress = _quiet,
              timer: Callable[[], float] | None = None,
              autorange: str = "adaptive",
              callgrind_counts: list[dict] | None = None) -> tuple[list[Row], list[dict], list[str]]:
    """Measure every case at every thread count, case by case (its counts interleaved, measure.interleaved),
    within the budget: no case starts once it is spent. With callgrind, the
    function-level counts of each case go to `callgrind_counts` (Results.callgrind)."""
    callgrind_counts = [] if callgrind_counts is None else callgrind_counts
    rows: list[Row] = []
    skipped: list[dict] = []
    notes: list[str] = []
    total = len(cases) * len(threads)
    done = 0
    referenced = 1 in threads and any(n > 1 for n in threads)  # the reference beside each case (measure.py)
    weight = 1.0 + (BESIDE_TURN_S / TURN_S if referenced else 0.0)  # the case's time, and its reference's
    here = usable_cpus()
    over = [n for n in threads if n > here]
    if over:
        notes.append(f"{', '.join(map(str, over))} thread(s) exceed the {here} usable CPU(s) here: "
                     "those rows measure oversubscription")
    cg_reason = cg.unavailable() if callgrind else None
    if cg_reason:
        notes.append(f"callgrind skipped: {cg_reason}")
    for index, case in enumerate(cases, 1):
        case_rows: list[Row] = []
        case_skips: list[dict] = []
        if budget.exhausted:
            for n in threads:
                case_skips.append(_skip(case, n, f"time budget of {budget.seconds:g} s spent"))
            done += len(threads)
        else:
            # the case's thread counts measured together, interleaved, with the reference beside them when a count
            # is parallel (measure.py): each measurement its share of the budget
            mrt = per_measurement_time(budget, math.ceil((total - done) * weight), cap=max_run_time)
            done += len(threads)
            try:
                env = namespace(case)
                before = cpu_snapshot()
                timings, *reference = interleaved(
                    [(case.stmt(), env)] + ([reference_side(threads)] if referenced else []), threads,
                    max_run_time=mrt, threshold=threshold, autorange=autorange, timer=timer)
                others = others_cpus(before, cpu_snapshot())
            except Exception as e:  # noqa: BLE001 - an op failing must not stop the other cases
                timings, reference, others = [], [], None
                for n in threads:
                    case_skips.append(_skip(case, n, f"measurement failed: {type(e).__name__}: {e}"))
            env = None
            ref = {t.threads: t.summary.median for t in reference[0]} if reference else {}
            for timing in timings:
                row = _row(case, timing)
                if timing.threads > 1 and ref.get(1) and ref.get(timing.threads):
                    row.reference_speedup = round(ref[1] / ref[timing.threads], 3)
                if others is not None:
                    row.others_cpus = round(others, 2)
                    row.contended = is_contended(others, timing.threads, here)
                case_rows.append(row)
                progress(f"{case.label()} @ {timing.threads} thread(s): {row.median_us:.2f} us, "
                         f"IQR {row.noise_pct:.1f}%, {row.runs} runs")
        fill_speedups(case_rows)
        if callgrind and case_rows and not cg_reason:
            one = next((r for r in case_rows if r.threads == 1), None)
            if one is None:
                case_skips.append(_skip(case, None, "callgrind counts one thread: add 1 to --threads"))
            elif budget.exhausted:
                case_skips.append(_skip(case, 1, "callgrind not run: time budget spent"))
            else:
                number = cg.choose_number(one.median_us * 1e-6)
                progress(f"{case.label()}: callgrind, {number} call(s) (slow: valgrind emulates start-up)")
                try:
                    counts = cg.collect(case, number)
                    one.instructions_per_call = counts.instructions_per_call
                    one.callgrind_number = counts.number
                    callgrind_counts.append({
                        "op": one.op, "input_shapes": one.input_shapes, "dtypes": one.dtypes,
                        "contiguous": one.contiguous, "strides": one.strides, "threads": 1,
                        "number": counts.number, "total": counts.total,
                        "functions": [[c, f] for c, f in counts.functions]})
                except Exception as e:  # noqa: BLE001 - valgrind failures are reported, not fatal
                    last = (str(e).strip().splitlines() or [type(e).__name__])[-1]
                    case_skips.append(_skip(case, 1, f"callgrind failed: {last}"))
        if reproducers:
            name = reproducer.write(reproducers, index, case, threads, _measured_text(case_rows))
            for r in case_rows:
                r.reproducer = name
            for s in case_skips:
                s["reproducer"] = name
        rows.extend(case_rows)
        skipped.extend(case_skips)
    contended = [r for r in rows if r.contended]
    if contended:
        notes.append(f"{len(contended)} of {len(rows)} measurement(s) ran while other processes held CPUs their "
                     "threads needed (external contention): those times and speedups describe the busy machine, "
                     "not the operator; re-run them when the machine is quiet")
    if any(s["reason"].startswith("time budget") for s in skipped):
        notes.append(f"the time budget ({budget.seconds:g} s) ran out after {len(rows)} of {total} measurements; "
                     "raise --budget to measure the rest")
    if any(c.layout.startswith("contiguous (assumed") for c in cases):
        notes.append("inputs were built contiguous: the report records no strides, and a non-contiguous input "
                     "would be a different benchmark")
    return rows, skipped, notes


def _settings(threads, budget_s, threshold, max_run_time, callgrind, autorange="adaptive", fuzz=None,
              **extra) -> dict:
    return {"threads": threads, "budget_s": budget_s, "threshold": threshold, "max_run_time_s": max_run_time,
            "callgrind": callgrind, "warmup_calls_after_thread_change": 3, "min_run_time_s": 0.2,
            "autorange": autorange, "fuzz": fuzz, **extra}


def load_report(path: str) -> dict:
    report = read_json(path, "diagnose report.json")
    if not isinstance(report, dict) or "operators" not in report:
        raise UsageError(f"{path}: not a diagnose report (no 'operators' list)")
    ops = report.get("operators")
    if not isinstance(ops, list):
        raise UsageError(f"{path}: 'operators' is not a list")
    return report


def from_report(report_path: str, *, top: int = DEFAULT_TOP, threads: list[int] | None = None,
                budget_s: float | None = DEFAULT_BUDGET_S, reproducers: str | None = None,
                threshold: float = DEFAULT_THRESHOLD, max_run_time: float = DEFAULT_MAX_RUN_TIME_S,
                callgrind: bool = False, progress: Progress = _quiet, autorange: str = "adaptive") -> Results:
    if top < 1:
        raise UsageError(f"--top must be >= 1, got {top}")
    report = load_report(report_path)
    import torch  # noqa: F401 - the budget counts from here: importing torch is not ours to spend
    budget = Budget(budget_s)
    threads = check_threads(threads) if threads else default_threads(report.get("machine"))
    cases, skipped = cases_from_report(report, top)
    progress(f"{len(cases)} case(s) from {os.path.basename(report_path)}, threads {threads}, "
             f"budget {budget_s:g} s")
    counts: list[dict] = []
    rows, more_skipped, notes = benchmark(cases, threads, budget=budget, threshold=threshold,
                                          max_run_time=max_run_time, callgrind=callgrind,
                                          reproducers=reproducers, progress=progress, autorange=autorange,
                                          callgrind_counts=counts)
    if not report["operators"]:
        layer = (report.get("layers") or {}).get("operators") or {}
        why = f" (operators layer {layer.get('status')}: {layer.get('reason')})" if layer else ""
        notes.append(f"the report has no operator rows{why}")
    elif not cases:
        notes.append(f"none of the top operator rows could be rebuilt (looked at {len(skipped)})")
    res = Results(command="from-report", machine=describe(), source_report=os.path.abspath(report_path),
                  settings=_settings(threads, budget_s, threshold, max_run_time, callgrind, autorange, top=top),
                  rows=rows, skipped=skipped + more_skipped, notes=notes, callgrind=counts)
    res.elapsed_s = round(budget.spent, 3)
    res.machine["report_machine"] = {k: (report.get("machine") or {}).get(k) for k in
                                     ("cpu_model", "usable_cpus", "intra_op_threads", "torch_version")}
    return res


def build_spec_case(op: str, shapes_text: str, *, dtype: str | None = None, dtypes: str | None = None,
                    args: dict[str, Any] | None = None) -> Case:
    """A case from command-line text; every problem is a UsageError."""
    shapes = parse_shapes(shapes_text)
    dts = spec_dtypes(shapes, dtype, dtypes)
    try:
        split_op_name(op)
    except CannotRebuild as e:
        raise UsageError(str(e)) from None
    try:
        case = build_case(op, shapes, dts, overrides=args or {})
        return validate(case)
    except CannotRebuild as e:
        raise UsageError(str(e)) from None


def run(op: str, shapes_text: str | list[str], *, dtype: str | None = None, dtypes: str | None = None,
        args: dict[str, Any] | None = None, threads: list[int] | None = None,
        budget_s: float | None = 30.0, reproducers: str | None = None, threshold: float = DEFAULT_THRESHOLD,
        max_run_time: float = DEFAULT_MAX_RUN_TIME_S, callgrind: bool = False,
        progress: Progress = _quiet, grid: dict[str, list[int]] | None = None, fuzz: int = 0,
        seed: int = 0, spread: float = fz.DEFAULT_SPREAD, autorange: str = "adaptive") -> Results:
    """One operator at one or several shapes (`--shapes` repeated, or symbols expanded over `grid`);
    with `fuzz` N > 0, N more shapes drawn around the (single) given one, seeded."""
    texts = expand_shapes([shapes_text] if isinstance(shapes_text, str) else list(shapes_text), grid)
    for text in texts:  # fail fast on malformed input, before the slow torch import
        spec_dtypes(parse_shapes(text), dtype, dtypes)
    if fuzz < 0:
        raise UsageError(f"--fuzz must be >= 0, got {fuzz}")
    if fuzz and len(texts) != 1:
        raise UsageError(f"--fuzz draws around one shape; got {len(texts)} (give one --shapes, no --grid)")
    if spread <= 1.0:
        raise UsageError(f"--fuzz-spread must be > 1, got {spread}")
    if autorange not in AUTORANGES:
        raise UsageError(f"--autorange must be one of {', '.join(AUTORANGES)}, got {autorange!r}")
    import torch  # noqa: F401 - the budget counts from here: importing torch is not ours to spend
    budget = Budget(budget_s)
    cases = [build_spec_case(op, text, dtype=dtype, dtypes=dtypes, args=args) for text in texts]
    skipped: list[dict] = []
    fuzz_settings = None
    if fuzz:
        drawn = fz.fuzzed_shapes(cases[0].input_shapes, fuzz, seed, spread)
        fuzz_settings = {"n": fuzz, "seed": seed, "spread": spread, "shapes": drawn,
                         "rule": FUZZ_RULE}
        for shapes in drawn:
            text = fz.json_shapes(shapes)
            try:
                case = build_spec_case(op, text, dtype=dtype, dtypes=dtypes, args=args)
            except UsageError as e:
                skipped.append({"op": op, "input_shapes": shapes, "dtypes": cases[0].dtypes, "source": None,
                                "self_pct": None, "threads": None, "reason": f"fuzzed shape rejected: {e}"})
                continue
            cases.append(case)
        progress(f"--fuzz {fuzz} --seed {seed}: " + "; ".join(fz.json_shapes(s) for s in drawn))
    for case in cases:
        case.layout = "contiguous"
    threads = check_threads(threads) if threads else default_threads()
    counts: list[dict] = []
    rows, more_skipped, notes = benchmark(cases, threads, budget=budget, threshold=threshold,
                                          max_run_time=max_run_time, callgrind=callgrind,
                                          reproducers=reproducers, progress=progress, autorange=autorange,
                                          callgrind_counts=counts)
    res = Results(command="run", machine=describe(),
                  settings=_settings(threads, budget_s, threshold, max_run_time, callgrind, autorange,
                                     fuzz_settings),
                  rows=rows, skipped=skipped + more_skipped, notes=notes, callgrind=counts)
    res.elapsed_s = round(budget.spent, 3)
    return res
