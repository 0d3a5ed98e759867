"""The what-if layer (`--what-if LIST|auto`): code changes measured on the user's own steps.

A derived layer, opt-in, after the doctor. It picks the variants
(diagnose/whatif/variants.py), announces what the run will cost, then runs
the uninstrumented workload (the same window of steps, or function mode's
measured calls) in interleaved rounds: the unchanged run and every variant
once per round, each a fork of the fork server with the variant applied from
outside (diagnose/whatif/child.py), with the doctor's statistics
(diagnose/doctor/trials.py: speedup, 95% interval, noise floor, verdict).
Then each variant's outputs are compared with the baseline's
(diagnose/whatif/outputs.py). A variant is recommended only when it won
(outside the noise, every round) and its outputs match.

The compile variant also reports torch._dynamo's compile time per round
(the slowest: coldest caches; the fastest: inductor's on-disk cache warm),
the break-even number of steps, and the graph breaks (torch._dynamo's
graph_breaks log, first round: where and why) and recompiles with their
reasons.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

from diagnose.doctor import trials as trials_mod
from diagnose.layers.base import DerivedContext, Layer
from diagnose import protocol
from diagnose.protocol import Overrides, WhatIfPass, WhatIfSpec
from diagnose.report.model import (
    CompileCost,
    LayerStatus,
    OutputCheck,
    Report,
    WhatIf,
    WhatIfVariant,
)
from diagnose.usercode import UserCode
from diagnose.whatif import outputs, variants as variants_mod


class WhatIfLayer(Layer):
    name = "what_if"
    long_window = True
    compares_reruns = True
    description = "code changes (inference_mode, channels_last, bf16, compile, ...) measured on your steps"
    derived = True

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        requested = list(context.config.what_if or ["auto"])
        what_if = report.what_if = WhatIf(requested=requested)
        chosen, what_if.skipped = variants_mod.choose(report, requested)
        if not chosen:
            return LayerStatus("ok", notes=["no variant applies to this run: " + "; ".join(
                f"{s.name}: {s.reason}" for s in what_if.skipped)] if what_if.skipped else [])
        if context.rerun is None or report.run.interrupted:
            return LayerStatus("skipped", "the workload cannot be re-run from here")
        rounds, most = trials_mod.ROUNDS, context.config.trials.rounds
        passes = rounds * (len(chosen) + 1)
        per_pass = _pass_seconds(report)
        what_if.estimate_s = round(passes * per_pass, 1)
        compiling = any(c.name == "compile" for c in chosen)
        if context.say:
            context.say(f"what-if: {len(chosen)} variant(s) ({', '.join(c.name for c in chosen)}) x {rounds} rounds "
                        f"+ the unchanged run: {passes} runs of about {per_pass:.1f} s "
                        f"= about {what_if.estimate_s:.0f} s ("
                        + (f"a variant that wins, or that those rounds cannot decide, runs on to {most})"
                           if most > rounds else f"--trial-rounds {most}: no variant runs on)")
                        + (", plus torch.compile's compilation in each of the compile runs (seconds for a small "
                           "model, minutes for a large one)" if compiling else ""))
        out_dir = os.path.join(workdir, "passes")
        os.makedirs(out_dir, exist_ok=True)
        baseline = Overrides(what_if=WhatIfSpec(None, out_dir))
        variants = [trials_mod.Variant(c.name, "what_if", c.change, overrides=Overrides(
            what_if=WhatIfSpec(c.name, out_dir), flush_denormal=c.name == "flush_denormal")) for c in chosen]
        run = trials_mod.Counted(context.rerun, passes, context.on_trial, "what-if")

        def pass_info(r: int, side: str) -> WhatIfPass | None:  # what one pass wrote (whatif/child.py), or None
            return protocol.read_result(os.path.join(out_dir, f"{trials_mod.pass_name(r, side)}.json"), WhatIfPass)

        def unchanged(v: trials_mod.Variant):  # a structural truth before any statistic (variants.no_effect)
            return variants_mod.no_effect(v.name, report, [pass_info(r, v.name) for r in range(rounds)])

        def may_win(v: trials_mod.Variant) -> bool:  # asked after the first rounds: recommended needs matching outputs
            reference = pass_info(0, "baseline")
            return outputs.check(pass_info(0, v.name), variants_mod.TOLERANCE[v.name],
                                 reference.captured if reference else None,
                                 outputs.self_check(pass_info(1, "baseline"))).status == "match"

        t0 = time.monotonic()

        trials = {t.name: t for t in trials_mod.run_trials(variants, run, rounds, baseline, unchanged, more=run.more,
                                                           may_win=may_win, extended=most)}
        what_if.elapsed_s = round(time.monotonic() - t0, 1)
        unchecked = outputs.self_check(pass_info(1, "baseline"))
        reference = pass_info(0, "baseline")
        compared = reference.captured if reference else None
        code = UserCode(report.target.script)
        for c in chosen:
            trial = trials[c.name]
            mine = pass_info(0, c.name)
            applied = (mine.applied if mine else None) or ""
            if applied.startswith("failed") and trial.verdict != "failed":
                trial.verdict, trial.reason = "failed", f"the change could not be applied: {applied[8:]}"
            check = outputs.check(mine, variants_mod.TOLERANCE[c.name], compared, unchecked)
            if trial.verdict == "failed":
                check = OutputCheck("unchecked", tolerance=check.tolerance, reason="the variant's run failed")
            row = WhatIfVariant(name=c.name, why=c.why, trial=trial, outputs=check,
                                recommended=trial.verdict == "win" and check.status == "match")
            if c.name == "compile":
                row.compile = _compile_cost([pass_info(r, c.name) for r in range(rounds)], trial, code)
            what_if.variants.append(row)
        if unchecked:
            what_if.notes.append(f"outputs not checked: {unchecked}; no variant is recommended without that check")
        what_if.notes.append("each run seeds torch, random and numpy with 0 before your script, so unseeded weights "
                             "and inputs are the same in every run; the outputs compared are the outermost "
                             "module's at its second call, the first with the change applied")
        if any(c.name == "compile" for c in chosen):
            what_if.notes.append("compile ran with inductor's fallback_random on: compiled code draws its random "
                                 "numbers (dropout's masks) from eager's generator, so its outputs can be compared; "
                                 "by default inductor draws its own (the timing is of compile with fallback_random on)")
        return LayerStatus("ok")


def _pass_seconds(report: Report) -> float:
    """One re-run's expected wall time: the uninstrumented pass's, start to exit (a re-run measures the same
    window; without the thread sampler it is a little shorter), less the window's steps it does not measure when
    its steps are long (steps.rerun_steps, session.Window.capped). Set whenever the workload can be re-run."""
    s, it = report.steps, report.run.iterations
    unmeasured = 0.0
    if s and s.rerun_steps and it and it.median_s:
        unmeasured = max(0, s.window_steps - s.rerun_steps) * it.median_s
    return max(0.0, (report.run.pass_s or 0.0) - unmeasured)


def _compile_cost(infos: list[WhatIfPass | None], trial, code: UserCode) -> CompileCost:
    """Compile's one-off cost per round: `torch.compile()` itself (it imports inductor) and the first compiled
    call (tracing, generating and building kernels, and the call) less a compiled step; the slowest round and
    the fastest (inductor's on-disk cache warm). `infos`: the compile passes' results, round by round."""
    lead = infos[0] if infos else None
    first = lead.compile if lead else None
    step = trial.variant_step_s or 0.0
    times = [max(0.0, (i.apply_s or 0.0) + i.first_call_s - step) for i in infos
             if i is not None and isinstance(i.first_call_s, (int, float))]
    cost = CompileCost(compile_s=round(max(times), 3) if times else None,
                       compile_s_warm=round(min(times), 3) if len(times) > 1 else None,
                       graphs=first.graphs if first else 0)
    saved = (trial.baseline_step_s or 0.0) - step
    if cost.compile_s is not None and saved > 0 and trial.verdict == "win":
        cost.break_even_steps = math.ceil(cost.compile_s / saved)
    cost.recompiles = list(first.recompiles) if first else []
    cost.graph_breaks = [dataclasses.replace(b, source=_where(code, b.source) if b.source else None, count=b.count or 1)
                         for b in (lead.graph_breaks if lead else [])]
    return cost


def _where(code: UserCode, source: str) -> str:
    """`FILE:LINE` as reports show files (the user's relative to the working directory, a library's to its
    site-packages)."""
    path, _, line = source.rpartition(":")
    return f"{code.short(path)}:{line}"
