"""Formatting shared by the text renderers."""

from __future__ import annotations

from typing import Any, Callable

from diagnose.doctor import trials as trials_rule
from diagnose.report import borderline
from diagnose.report import sampled as sampled_views
from diagnose.report.model import Borderline, Finding, IterationStats, Peaks, Report


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def budget_line(report: Report) -> str | None:
    """The step budget in one line (diagnose/budget.py): "step 47.8 ms: kernels 78% (aten::mm 30%, ...), ...";
    None without a budget. Slices under 0.5% are left out of the line (report.json has them all)."""
    b = report.step_budget
    if b is None:
        return None
    parts = []
    for s in b.slices:
        if s.name != "unexplained" and abs(s.share) < 0.005:
            continue
        by_name: dict[str, float] = {}  # one operator at several shapes is one entry of the line
        for i in s.items if s.name in ("kernels", "native") else []:
            by_name[i.op or i.label] = by_name.get(i.op or i.label, 0.0) + i.share
        top = [(k, v) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v >= 0.05][:3]
        tops = f" ({', '.join(f'{k} {100 * v:.0f}%' for k, v in top)})" if top else ""
        # round() to an int first: a slice of -0.4% (unexplained, slices over-counting a little) reads 0%, not -0%
        pct = round(100 * s.share)
        if s.name == "unexplained" and pct < 0:  # the slices, each from its own pass, sum past the step
            parts.append(f"over-counted {-pct}% (the slices sum to {100 + -pct}% of the {b.unit})")
            continue
        parts.append(f"{'Python' if s.name == 'python' else s.name} {pct}%{tops}")
    return f"{b.unit} {duration(b.step_s)}: " + ", ".join(parts)


def verdict_line(report: Report) -> str | None:
    """The verdict (findings/verdict.py) in one line, None when the report was not judged."""
    return report.verdict.text if report.verdict else None


NOT_CONFIRMED_HEAD = "Not confirmed: results the tool doubts itself (not findings; re-measure before acting)"


def not_confirmed_lines(report: Report, indent: str) -> list[str]:
    """Each result the tool doubts (report.not_confirmed): its kind and title, then at `indent` why it is doubted
    and the command that re-measures it."""
    out = []
    for n in report.not_confirmed:
        f = n.finding
        out += [f"{f.kind}: {f.title}", f"{indent}doubted: {'; '.join(f.doubts)}"]
        if n.reproduce:
            out.append(f"{indent}re-measure: {n.reproduce}{reproduce_where(n.reproduce)}")
    return out


def reproduce_where(command: str) -> str:
    """Where a re-measuring command runs: a reproducer script's path is relative to the report's folder."""
    return " (from the report's folder)" if command.startswith("python ") else ""


def us(value: float) -> str:
    return duration(value / 1e6)


def shapes(input_shapes: list, limit: int = 48) -> str:
    text = ", ".join(str(s).replace(" ", "") for s in input_shapes if s != []) or "-"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def size(nbytes: float) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:.1f} {unit}"
    return f"{nbytes:.0f} B"


def spread(stats: IterationStats | None, unit: str = "iter") -> str:
    if stats is None:
        return ""
    noise = stats.iqr_over_median * 100
    warn = " (noisy)" if noise >= 10 else ""
    return f"median {duration(stats.median_s)}/{unit}, IQR ±{noise:.1f}%{warn}, n={stats.n}"


def timing_lines(report: Report) -> list[str]:
    """Wall times with their noise and the instrumentation overhead, in plain words."""
    run = report.run
    unit = "step" if report.target.mode == "script" else "iter"
    lines = []
    if report.target.mode == "attach":  # no pass of diagnose's own: the steps seen in the stacks, if any
        st = report.sampled.steps if report.sampled else None
        if st:
            return [f"sampled step: median {duration(st.median_s)} over {st.steps} step starts ({st.detail})"]
        return ["sampled step: none timed (the notes under Sampled say why)"]
    if run.iterations:
        lines.append(f"uninstrumented: {spread(run.iterations, unit)}")
    elif run.wall_s is not None:
        lines.append(f"uninstrumented: {duration(run.wall_s)} (one run, no steps: noise not measured; "
                     "diagnose.mark_step() in the loop or script.py:function gives per-step numbers)")
    if run.instrumented_iterations:
        lines.append(f"operator pass:  {spread(run.instrumented_iterations, unit)}")
    elif run.instrumented_wall_s is not None:
        lines.append(f"operator pass:  {duration(run.instrumented_wall_s)}")
    ratio = run.overhead_ratio
    if ratio:
        lines.append(f"instrumentation overhead: {ratio:.2f}x (operator times below come from the instrumented pass)")
    plain, instrumented = report.faults_per_step()
    if plain is not None:
        lines.append(f"minor page faults: {plain:.0f} per {unit} uninstrumented"
                     + (f", {instrumented:.0f} in the operator pass" if instrumented is not None else ""))
    return lines


def steps_lines(report: Report) -> list[str]:
    """How the steps were found, the window every pass measured, throughput, setup, data wait (script mode),
    and torch.compile's phase."""
    return _steps_only(report) + compile_lines(report)


def _steps_only(report: Report) -> list[str]:
    st = report.steps
    if st is None:
        return []
    if st.detector is None:
        return [f"steps: {note}" for note in st.notes]
    how = {"optimizer": "each optimizer step", "forward": "each call of the outermost module",
           "mark_step": "each diagnose.mark_step()"}.get(st.detector, st.detector)
    lines = [f"steps: {how} ends one ({st.detail}); the script ran {st.steps_seen}"
             + (" before diagnose ended it" if st.ended_target else "")]
    if st.window_first is not None:
        n = st.window_steps
        lines.append(f"window: steps {st.window_first}-{st.window_last} ({n}), measured by every pass")
        wall = report.run.wall_s
        if wall and n:
            rate = f"throughput: {n / wall:.3g} steps/s"
            if st.batch_size:
                rate += f", {n * st.batch_size / wall:.4g} samples/s (batch {st.batch_size})"
            lines.append(rate)
        if st.data_wait_s is not None and wall:
            lines.append(f"data wait: {duration(st.data_wait_s)} of the window ({100 * st.data_wait_s / wall:.0f}%) "
                         "inside DataLoader iterators")
    if st.setup_s is not None:
        lines.append(f"setup: {duration(st.setup_s)} before the first step (model, data, weights; not in the "
                     "operator or Python numbers)")
    if st.warmup_s:
        first = ", ".join(duration(x) for x in st.warmup_s[:5])
        lines.append(f"skipped steps (warm-up): {first}" + (" ..." if len(st.warmup_s) > 5 else ""))
    lines += [f"note: {n}" for n in st.notes]
    return lines


def compile_lines(report: Report) -> list[str]:
    """torch.compile as a phase: its one-time cost, graphs, graph breaks and recompiles with their reasons."""
    c = report.compile
    if c is None:
        return []
    if c.error:
        return [f"torch.compile: its counters could not be read ({c.error})"]
    when = ""
    if c.in_window_s:
        when = f", {duration(c.in_window_s)} of it inside the window (a recompile: the window's times include it)"
    elif report.steps is not None and report.steps.window_first is not None:
        when = " before the window (a one-time cost, not in the measured steps)"
    lines = [f"torch.compile: {duration(c.compile_s)} compiling {c.frames} frame(s) into {c.graphs} graph(s)"
             f"{when}; {sum(b.count for b in c.graph_breaks)} graph break(s), "
             f"{sum(r.count for r in c.recompiles)} recompile(s)"]
    lines += [f"  graph break x{b.count}: {b.reason}" for b in c.graph_breaks[:3]]
    lines += [f"  recompiled {r.code}: {r.reasons[0] if r.reasons else '?'}" for r in c.recompiles[:3]]
    return lines


def outcome_line(report: Report) -> str:
    run = report.run
    if report.target.mode == "attach":  # a running process sampled from outside (report/sampled.py)
        return sampled_views.outcome(report)
    if report.hangs:
        return f"the target hung: {run.error or 'its process tree stopped using the CPU'}"
    if run.interrupted:
        return "interrupted: the report holds what was measured before Ctrl-C or SIGTERM"
    if run.timed_out:
        return f"the target {run.error}"
    if run.error:
        return f"the target failed (exit code {run.exit_code}): {run.error}"
    return f"the target finished (exit code {run.exit_code})"


def python_split_line(report: Report) -> str | None:
    """Operators vs Python in the call-graph pass, with that pass's own slowdown."""
    s = report.python_summary
    if s is None or not s.total_s:
        return None
    split, total = s.split_s, s.total_s
    numpy = s.numpy_s or 0.0  # numpy's work in the user's own lines, sampled: in split.builtin
    parts = ", ".join(f"{label} {100 * seconds / total:.0f}%"
                      for seconds, label in ((split.user, "your code"), (split.library, "library Python"),
                                             (numpy, "numpy in your lines (sampled)"),
                                             (split.builtin - numpy, "other built-ins"), (split.wait, "waiting"))
                      if label not in ("waiting", "numpy in your lines (sampled)") or seconds)
    line = f"operators (torch built-ins) {100 * s.operator_share:.0f}% vs Python {100 * s.python_share:.0f}% ({parts})"
    ratio = s.overhead_ratio
    if ratio:
        line += f"; cProfile pass {duration(s.wall_s)} vs {duration(report.run.wall_s)} uninstrumented ({ratio:.2f}x), which inflates Python most"
    else:
        line += "; from the cProfile pass, which inflates Python most"
    return line


def user_functions(report: Report, limit: int):
    """The user's functions that cost most, by time they spend themselves or in tiny calls."""
    rows = [r for r in report.python_hotspots if r.kind == "user"]
    rows.sort(key=lambda r: (-(r.loop_overhead_s or 0.0), -r.cumulative_s))
    return rows[:limit]


def threads_lines(report: Report) -> list[str]:
    """What the thread sampler saw, in plain words, with how it was measured."""
    t = report.threads
    if t is None or t.mean_runnable is None:
        return []
    how = "schedstat" if t.schedstat_available else "sampled thread states (schedstat off: coarser)"
    lines = [f"sampled /proc every {t.interval_s} s for {duration(t.duration_s)} "
             f"({t.samples} samples, from {how}) "
             + ("while attached" if report.target.mode == "attach" else "during the uninstrumented pass"),
             f"{t.usable_cpus} usable CPUs; mean runnable threads {t.mean_runnable:.2f}; "
             f"run-queue wait {100 * (t.runqueue_wait_share or 0):.0f}% of runnable time; "
             f"CPUs used {t.cpu_used or 0:.2f}"
             + (f"; other processes used {t.others_cpus:.2f} CPUs" if t.others_cpus is not None else "")]
    for p in t.processes[:6]:
        if not p.compute and p.role != "target":
            continue
        pools = ", ".join(f"{k} {v}" for k, v in p.threads.items())
        active = sum(p.active_threads.values())
        who = f"rank {p.rank}" if p.rank is not None else p.role  # torchrun ranks (distributed)
        lines.append(f"{who} pid {p.pid}: {p.max_threads} threads ({pools}), "
                     f"{active} active; runnable {p.mean_runnable or 0:.2f}, CPUs {p.cpu_used or 0:.2f}, "
                     f"wait {100 * (p.wait_share or 0):.0f}%")
    for p, b in t.busy_python()[:4]:  # /proc names them like their process: the target said which they are
        lines.append(f"Python thread {p.name!r}" + (f" runs {p.target}()" if p.target else "")
                     + (f" ({p.defined_at})" if p.defined_at else "")
                     + (f", started at {p.started_at}" if p.started_at else "")
                     + f": {b.cpu_used or 0:.2f} CPUs")
    health = t.health
    if health is not None and health.overhead_cpu_share is not None:
        lines.append(f"sampler cost {100 * health.overhead_cpu_share:.2f}% of one CPU; "
                     f"{health.missed_samples} missed samples, "
                     f"{health.unreadable_files} unreadable files")
    return lines


def doctor_check_rows(report: Report) -> list[tuple[str, ...]]:
    """The doctor's checks as table rows (header first): check, verdict, what it found, what to change."""
    doctor = report.doctor
    if doctor is None or not doctor.checks:
        return []
    rows = [("check", "verdict", "finding", "suggestion")]
    for c in doctor.checks:
        rows.append((c.name, c.status, c.summary, c.suggestion or "-"))
    return rows


def _trial_verdict(t) -> str:
    if t.no_effect is not None:
        return f"no gain ({t.no_effect.reason})"
    verdict = {"win": "win: recommended", "no gain": "tried: no gain", "slower": "tried: slower"}.get(
        t.verdict, f"{t.verdict}" + (f" ({t.reason})" if t.reason else ""))
    if t.led_by and t.verdict == "win":  # another change of its check was the surest win and ran on in its place
        verdict += f" (its size from {t.rounds} rounds: {t.led_by} led its check and ran on)"
    elif t.led_by and t.verdict == "no gain":  # undecided: another change of its check ran on in its place
        return f"undecided in {t.rounds} rounds: {t.led_by} led its check and ran on"
    if t.capped:  # it would have run on, and --trial-rounds kept it at its first rounds
        if t.verdict == "no gain":  # not a measured absence of gain: the rounds did not rule one out
            return f"undecided: --trial-rounds stopped it at {t.rounds} rounds"
        verdict += (f" (its size from {t.rounds} rounds: --trial-rounds stopped it)" if trials_rule.decided_win(t)
                    else f" (not settled: --trial-rounds stopped it at {t.rounds} rounds)")
    return verdict


def no_effect_line(t) -> str | None:
    """A trial whose change provably changes nothing here: "REASON: NAME changes nothing here (EVIDENCE)"."""
    e = t.no_effect
    return f"{e.reason}: {t.name} changes nothing here ({e.evidence})" if e is not None else None


def trial_rule() -> str:
    """How a trial decides (diagnose/doctor/trials.py), in the words every renderer prints."""
    return (f"a change is recommended only when it saves at least {trials_rule.MIN_EFFECT:.0%} of the step "
            f"({trials_rule.MIN_SPEEDUP:.3f}x), its 95% interval "
            f"is above 1x, it beats the noise floor and it won every one of {trials_rule.ROUNDS} rounds; a win runs on "
            f"to {trials_rule.EXTENDED_ROUNDS} rounds for its size (its median round and a sign-test interval; it stays "
            f"a win while that median saves {trials_rule.MIN_EFFECT:.0%}) unless its interval's low end and "
            f"slowest round are at least {trials_rule.SETTLED_SPEEDUP:.2f}x (more rounds could not take it under the "
            f"saving of a high finding), and one those rounds cannot decide runs on and is judged on them (the median, "
            f"its sign-test interval above 1x), unless --trial-rounds set fewer (a trial that bound stopped says so); "
            f"the steps before and after pool every pass's steps (their lower quartile), so a speedup marked \"median "
            f"round\" need not be their ratio")


def doctor_trial_rows(report: Report) -> list[tuple[str, ...]]:
    """The doctor's trials as table rows (header first), each measured on the user's own steps."""
    doctor = report.doctor
    if doctor is None or not doctor.trials:
        return []
    rows = [("change", "for", "step before", "step after", "speedup", "95% interval", "noise floor", "rounds",
             "verdict")]
    for t in doctor.trials:
        rows.append((t.name, t.check, *_trial_cells(t), _trial_verdict(t)))
    return rows


def _trial_cells(t) -> tuple[str, ...]:
    """A trial's measured cells: step before, step after, speedup, 95% interval, noise floor, rounds."""
    # a trial that ran on is judged on its rounds: its speedup is the median round's, not the pooled steps' ratio
    speedup = f"{t.speedup:.2f}x" + (" (median round)" if t.method == "rounds" else "") if t.speedup else "-"
    return (duration(t.baseline_step_s), duration(t.variant_step_s), speedup,
            f"{t.ci_low:.2f}-{t.ci_high:.2f}x" if t.ci_low is not None else "-",
            f"{t.noise_floor_pct:.1f}%" if t.noise_floor_pct is not None else "-", str(t.rounds))


def what_if_rows(report: Report) -> list[tuple[str, ...]]:
    """--what-if: each variant measured on the user's steps (header first)."""
    w = report.what_if
    if w is None or not w.variants:
        return []
    rows = [("change", "step before", "step after", "speedup", "95% interval", "noise floor", "rounds", "outputs",
             "verdict")]
    for v in w.variants:
        t, o = v.trial, v.outputs
        if o.status == "unchecked":
            out = "unchecked"
        elif o.rel_diff is not None:
            out = f"{o.status} (rel. diff {o.rel_diff:.2g}, tol. {o.tolerance:g})" if o.rel_diff else f"{o.status} (identical)"
        else:
            out = o.status
        verdict = "recommended" if v.recommended else _trial_verdict(t)
        if t.verdict == "win" and not v.recommended:
            verdict = "faster, outputs " + ("differ" if o.status == "differ" else "unchecked")
        rows.append((v.name, *_trial_cells(t), out, verdict))
    return rows


def what_if_lines(report: Report) -> list[str]:
    """The changes to make, torch.compile's cost and graph breaks, what was not run and why, the notes."""
    w = report.what_if
    if w is None:
        return []
    out = []
    for v in w.variants:
        if v.recommended:
            out.append(f"{v.name}: {v.trial.change}")
        elif v.trial.no_effect is not None:
            out.append(f"{v.name}: {no_effect_line(v.trial)}")
        elif v.trial.reason:
            out.append(f"{v.name}: {v.trial.verdict}: {v.trial.reason}")
        elif v.outputs.status != "match" and v.outputs.reason and v.trial.verdict != "failed":
            out.append(f"{v.name}: outputs {v.outputs.status}: {v.outputs.reason}")
        c = v.compile
        if c is None:
            continue
        cost = []
        if c.compile_s is not None:
            cost.append(f"compile {duration(c.compile_s)}" + (f" ({duration(c.compile_s_warm)} with a warm cache)"
                                                               if c.compile_s_warm is not None else ""))
        if c.break_even_steps:
            cost.append(f"repays after {c.break_even_steps} steps")
        cost.append(f"{c.graphs} graph(s), {len(c.graph_breaks)} graph break(s)")
        out.append("compile: " + ", ".join(cost))
        for b in c.graph_breaks[:8]:
            where = " at " + b.source if b.source else ""
            skipped = " (dynamo gave up on the whole function: it runs eagerly)" if b.skipped else ""
            out.append(f"  graph break{where}{skipped}: {b.reason}" + (f" (x{b.count})" if b.count > 1 else ""))
        for r in c.recompiles[:5]:
            out.append(f"  recompiled {r.code} x{r.count}: {'; '.join(r.reasons[:2])}")
    for s in w.skipped:
        out.append(f"not run: {s.name}: {s.reason}")
    if w.estimate_s is not None:
        out.append(f"cost: {duration(w.elapsed_s)} (announced about {duration(w.estimate_s)}, compilation not included)")
    return out + list(w.notes)


def doctor_lines(report: Report) -> list[str]:
    """The checks that warned, the exact changes that won, and the launch line with all the winners."""
    doctor = report.doctor
    if doctor is None:
        return []
    out = [f"{c.name}: {c.summary}" for c in doctor.checks if c.status == "warn"]
    ok = [c.name for c in doctor.checks if c.status == "ok"]
    if ok:
        out.append("fine: " + ", ".join(ok))
    skipped = [c.name for c in doctor.checks if c.status == "skipped"]
    if skipped:
        out.append("not checked: " + ", ".join(skipped) + " (reasons in the report)")
    for t in doctor.trials:
        if t.verdict == "win" and not t.env:
            out.append(f"measured win, a code change: {t.change}")
        elif t.no_effect is not None:
            out.append(no_effect_line(t))
    if doctor.launch:
        out.append(f"launch with: {doctor.launch}")
    return out


def sweep_rows(report: Report) -> tuple[list[tuple[str, ...]], str | None]:
    """The thread sweep as table rows (header first) and its recommendation line."""
    sweep = report.threads.sweep if report.threads else None
    if sweep is None:
        return [], None
    points = sweep.threads + sweep.workers
    if not points:
        return [], sweep.status
    unit = sweep.unit
    rows = [("intra-op threads", "DataLoader workers", f"time per {unit[:-1]}", f"{unit}/s", "spread", "runs")]
    for p in points:
        w = p.dataloader_workers
        rows.append((str(p.intra_op_threads), "-" if w is None else str(w), duration(p.median_s),
                     f"{p.throughput_per_s:.3g}" if p.throughput_per_s else "failed",
                     f"±{p.spread_pct / 2:.1f}%" if p.spread_pct is not None else "-",
                     f"{len(p.runs_s)}" + (f" ({p.failed_runs} failed)" if p.failed_runs else "")))
    rec = sweep.recommendation
    line = None
    if rec:
        gain = rec.gain_vs_configured_pct
        line = (f"recommended: {rec.code}  (or {rec.env}): the smallest setting within "
                f"{sweep.tolerance_pct}% of the best measured throughput"
                + (f"; {gain:+.1f}% vs the configured {sweep.configured_threads} threads" if gain is not None else ""))
        over = rec.passed_over
        if over:
            line += (f"; {over.intra_op_threads} threads measured {over.lead_pct:+.1f}%, not clearly faster "
                     f"than the {sweep.usable_cpus} usable CPUs (more than {sweep.tolerance_pct}%, "
                     "in every run), so not worth oversubscribing")
    return rows, line


def microbench_rows(report: Report, limit: int = 12) -> list[tuple[str, ...]]:
    """Micro-benchmark rows (header first), each time with its own noise."""
    rows = report.microbenchmarks[:limit]
    if not rows:
        return []
    out = [("operator", "input shapes", "threads", "median", "noise", "speedup", "efficiency", "GFLOP/s", "source")]
    for r in rows:
        noise = r.noise_pct
        flags = ("!" if r.noisy else "") + (" contended" if r.contended else "")
        out.append((str(r.op), shapes(r.input_shapes, 40), str(r.threads),
                    us(r.median_us) if r.median_us else "-",
                    (f"IQR {noise:.1f}%" if noise is not None else "-") + flags,
                    (f"{r.speedup_vs_1_thread:.2f}x" if r.speedup_vs_1_thread else "-")
                    + (f" (ref {r.reference_speedup:.2f}x)" if r.reference_speedup else ""),
                    f"{100 * r.parallel_efficiency:.0f}%" if r.parallel_efficiency else "-",
                    f"{r.gflops_per_s:.1f}" if r.gflops_per_s else "-",
                    str(r.source or "-")))
    return out


def efficiency_rows(report: Report, limit: int = 10) -> list[tuple[str, ...]]:
    """Hot operators against this machine's roofs (header first)."""
    ops = report.efficiency.operators if report.efficiency else []
    rows = [r for r in ops if r.efficiency_pct is not None][:limit]
    if not rows:
        return []
    out = [("operator", "input shapes", "share", "GFLOP/s", "GB/s", "FLOP/B", "bound", "of roof", "source")]
    for r in rows:
        out.append((str(r.name), shapes(r.input_shapes or [], 36), f"{r.share_pct or 0:.0f}%",
                    f"{r.achieved_gflops_per_s:.3g}" if r.achieved_gflops_per_s is not None else "-",
                    f"{r.achieved_gb_per_s:.3g}" if r.achieved_gb_per_s is not None else "-",
                    f"{r.intensity_flop_per_byte:.3g}" if r.intensity_flop_per_byte is not None else "-",
                    str(r.bound or "-") + (" (in cache)" if r.cache_resident else ""),
                    f"{r.efficiency_pct:.0f}%", str(r.source or "-")))
    return out


def spread_source(peaks: Peaks) -> str:
    """The process spread the floor is taken from, and where it came from, in words."""
    hist, probe = peaks.spread_history, peaks.process_spread
    if hist is not None:
        return (f"{hist.spread_pct:g}% on the same work (this machine's last {hist.processes} runs' timings over "
                f"{hist.span_h:g} h)")
    if probe is None:
        return "unmeasured"
    sampled = (f"; the history has {peaks.spread_samples} of the "
               f"{borderline.HISTORY_MIN} runs' timings it needs"
               if peaks.spread_samples is not None else "")
    return (f"{probe.spread_pct:g}% on the same work ({probe.processes} forked by the probe"
            f"{', contended: not used' if probe.contended else ''}{sampled})")


def roofs_line(report: Report) -> str | None:
    e = report.efficiency
    if e is None:
        return None
    roofs = e.roofs
    cached = " (cached probe; `diagnose probe --refresh` re-measures)" if e.peaks.cached else ""
    raised = (f" (raised from the probe's {roofs.probed_gflops_per_s} to what {roofs.raised_by} reached)"
              if roofs.raised_by else "")
    spread = borderline.process_spread(report)
    spread_text = (f"; processes spread {spread_source(e.peaks)}, the floor of a finding's interval is "
                   f"{100 * borderline.floor(report):.3g}% for a share, {100 * borderline.floor(report, 'time'):.3g}% "
                   "for a time" if spread is not None else "")
    return (f"roofs at {roofs.threads} threads: fp32 GEMM {roofs.gflops_per_s} GFLOP/s{raised}, memory "
            f"{roofs.gb_per_s} GB/s, ridge {roofs.ridge_flop_per_byte} FLOP/byte{cached}{spread_text}")


def counters_lines(report: Report) -> list[str]:
    c = report.counters
    if c is None:
        return []
    values = ((c.cpi, "CPI"), (c.ipc, "IPC"), (c.cache_miss_pct, "cache misses %"),
              (c.branch_miss_pct, "branch misses %"), (c.spin_overhead_pct, "spin + overhead %"))
    parts = [f"{label} {value:.3g}" for value, label in values if isinstance(value, (int, float))]
    return [", ".join(parts)] if parts else []


def short_reason(reason: str | None, limit: int = 90) -> str:
    """A layer's reason cut to its first clause, for one-line summaries."""
    text = (reason or "").split(". ")[0].split("; ")[0].split(" (")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def folded_stacks(report: Report) -> str:
    """stacks.folded (flamegraph.pl, speedscope): `frame;frame;...;frame COUNT` per line, COUNT in
    microseconds of self CPU time in the operator pass."""
    return "".join(f"{';'.join(s.frames)} {max(1, round(s.self_cpu_us))}\n" for s in report.stacks)


def per_call(row) -> str:
    """min / mean / max self time per call."""
    if not row.calls:
        return "-"
    mean = duration(row.self_cpu_us / row.calls / 1e6)
    if row.min_self_us is None or row.max_self_us is None or row.calls == 1:
        return mean
    return f"{duration(row.min_self_us / 1e6)} / {mean} / {duration(row.max_self_us / 1e6)}"


def places(report: Report) -> str | None:
    """Where the operator time ran, when not all in the main process's main thread: "pool worker 97% (4
    processes), main thread 3%"; None otherwise (and for reports from before rows said it)."""
    by_place: dict[tuple[str, str | None], float] = {}
    for row in report.operators:
        for share in row.processes:
            key = (share.role, share.thread if share.role == "main" else None)
            by_place[key] = by_place.get(key, 0.0) + share.self_cpu_us
    if not by_place or list(by_place) == [("main", "MainThread")]:
        return None
    total = sum(by_place.values()) or 1.0
    counts: dict[str, int] = {}
    for child in (report.operator_summary.children if report.operator_summary else []):
        counts[child.role] = counts.get(child.role, 0) + 1
    parts = []
    for (role, thread), us in sorted(by_place.items(), key=lambda kv: -kv[1]):
        if role == "main":
            name = "main thread" if thread == "MainThread" else f"thread {thread}" if thread else "unnamed threads"
        else:
            name = role + (f" ({counts[role]} processes)" if counts.get(role, 0) > 1 else "")
        parts.append(f"{name} {100 * us / total:.0f}%")
    return ", ".join(parts)


def module_where(row) -> str | None:
    return row.where_module()


def library_where(row) -> str | None:
    return row.library_elsewhere()


def module_class_lines(report: Report, limit: int = 8) -> list[str]:
    """"4 BertSelfAttention: 26.6% (its own operators 9.6%), 80 calls" per class, by total time."""
    m = report.modules
    if m is None:
        return []
    total = m.total_cpu_us or 1.0
    out = []
    for c in [c for c in m.classes if c.module_class != m.root_class or c.instances > 1][:limit]:
        own = f", its own operators {100 * c.self_cpu_us / total:.1f}%" if c.self_cpu_us and c.self_cpu_us < c.total_cpu_us else ""
        out.append(f"{c.instances} {c.module_class}: {c.total_pct:.1f}% of operator time{own}, {c.calls} calls")
    if m.outside_cpu_us:
        out.append(f"outside any module (optimizer, functional code): {100 * m.outside_cpu_us / total:.1f}%")
    return out


def hot_modules(report: Report, limit: int = 8) -> list[tuple[str, str, int, float]]:
    """The modules whose own operators take most time, instances of one place in the model summed
    (`encoder.layer.*.intermediate.dense`): (path pattern, class, instances, share of operator time %)."""
    m = report.modules
    if m is None:
        return []
    groups: dict[tuple[str, str], list[float]] = {}
    for r in m.rows:
        if r.self_cpu_us > 0:
            pattern = ".".join("*" if part.isdigit() else part for part in r.path.split(".")) if r.path else ""
            groups.setdefault((pattern, r.module_class), []).append(r.self_cpu_us)
    total = m.total_cpu_us or 1.0
    out = [(p or "(outermost)", c, len(v), 100 * sum(v) / total) for (p, c), v in groups.items()]
    return sorted(out, key=lambda g: -g[3])[:limit]


def budget_modules(report: Report, limit: int = 8) -> list[tuple[str, float]]:
    """The modules whose own operators take most of the step (hot_modules, instances summed), each as
    (label, share of the step 0-1): its share of operator time times the step budget's kernels slice. Empty
    without a kernels slice, or with fewer than two module groups (a bar per module says nothing then)."""
    b = report.step_budget
    kernels = next((s for s in b.slices if s.name == "kernels"), None) if b else None
    hot = hot_modules(report, limit)
    if kernels is None or len(hot) < 2:
        return []
    return [(f"{path} ({cls}{f' x{n}' if n > 1 else ''})", pct / 100 * kernels.share) for path, cls, n, pct in hot]


def borderline_text(b: Borderline) -> str:
    """'borderline high: share of operator CPU time 27-33% within this run's noise, the high line at 30%'."""
    return (f"borderline {b.would_be}: {b.measure} {b.low:.3g}-{b.high:.3g}{b.unit} within this run's noise, "
            f"the {b.would_be} line at {b.threshold:.3g}{b.unit}")


def severity_tag(f: Finding) -> str:
    """"medium", or "medium, borderline high" when its number straddles the high line (report/borderline.py)."""
    return f"{f.severity}, borderline {f.borderline.would_be}" if f.borderline else f.severity


def also_label(piece: Finding, op: bool = True) -> str:
    """A finding merged into another at its line (Finding.also): "[low] hot_operator aten::std (operators)", its
    operator named (`op`) where the label stands alone, as in the terminal summary."""
    named = f" {piece.op}" if op and piece.op else ""
    return f"[{piece.severity}] {piece.kind}{named} ({piece.layer})"


def also_heading(finding: Finding) -> str:
    """What a finding's merged pieces are (Finding.also): others at its line, or, where one has no line (memory_churn
    holds the doctor's page_faults: the time of the line's allocations), others about the same time."""
    if finding.location and all(a.location for a in finding.also):
        return "also at this line"
    return "also about the same time"


def findings_list(findings: list[Finding], top: int, *, head: Callable[[int, Finding], str], indent: str,
                  more: Callable[[int], str], also: Callable[[Finding], str] = also_label,
                  evidence: Callable[[Finding], str] | None = None) -> list[str]:
    """The findings list of the terminal summary and report.md: per finding (the first `top`, numbered from 1)
    its `head` line, then at `indent` what to try, its `evidence` (when given) and what other layers saw at its
    line; then `more(n)` for the n left out."""
    out = []
    for i, f in enumerate(findings[:top], 1):
        out += [head(i, f), f"{indent}try: {f.suggestion}"]
        if evidence is not None:
            out.append(f"{indent}evidence: {evidence(f)}")
        if f.also:
            out.append(f"{indent}{also_heading(f)}: " + "; ".join(also(a) for a in f.also))
    if len(findings) > top:
        out.append(more(len(findings) - top))
    return out


def evidence_items(f: Finding) -> list[tuple[str, Any]]:
    """(name, value) pairs for report.md's evidence line and report.html's evidence table, empty values left
    out: the numbers its rule measured, then its doubts, where it ran (`place`), its time at stake, whether it is
    an observation, its confidence and its severity's provenance. Each is named as in report.json, the stake's
    as before schema 3 (`time_at_stake_pct`, `confidence`, `confidence_why`); the stake's basis is for each
    renderer to place. `observation` follows `compute_kernel`, its main reason, where the rule records that
    (hot_operator), where both renderers always listed it."""
    s, p = f.stake, f.place
    beside = "compute_kernel" in f.evidence
    items: list[tuple[str, Any]] = []
    for key, value in f.evidence.items():
        items.append((key, value))
        if key == "compute_kernel":
            items.append(("observation", f.observation))
    items.append(("doubts", f.doubts))
    if p is not None:
        items += [("module", p.module), ("module_class", p.module_class), ("library_line", p.library_line)]
    items.append(("time_at_stake_pct", s.pct if s else None))
    if not beside:
        items.append(("observation", f.observation))
    items += [("confidence", s.confidence if s else None), ("confidence_why", s.confidence_why if s else []),
              ("rule_severity", f.rule_severity), ("severity_basis", f.severity_basis),
              ("severity_from", f.severity_from),
              ("borderline", borderline_text(f.borderline) if f.borderline else None)]
    return [(k, v) for k, v in items if v not in (None, [], {})]


def text_table(rows: list[tuple[str, ...]], right: set[int] | None = None) -> list[str]:
    """Fixed-width text rows (header first), two-space indented; `right`: right-aligned columns (default 2-5)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 5} if right is None else right
    lines = []
    for r in rows:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines
