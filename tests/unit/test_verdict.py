"""The verdict and the not-confirmed list (diagnose/findings/verdict.py) on committed real reports, and how the
renderers show them with the step budget's pictures (budget.png, report.html's bars)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from diagnose import budget, findings
from diagnose.findings import copies, verdict
from diagnose.findings.efficiency import low_efficiency
from diagnose.render import fmt, html, markdown, plots, terminal
from diagnose.report import io as report_io
from diagnose.report.model import PEAKS_CONTENDED_DOUBT

DATA = Path(__file__).resolve().parents[1] / "data" / "findings"


def judged(name: str):
    report = report_io.load(str(DATA / f"{name}_window_report.json"))
    report.step_budget = budget.of(report)
    findings.judge(report)
    return report


def test_bert_inference_is_healthy_with_the_numbers_that_say_so():
    r = judged("bert_infer")
    v = r.verdict
    kernels = next(s for s in r.step_budget.slices if s.name == "kernels")
    # the recording's numbers: kernels 78% of the step, its three largest GEMMs at 94-98% of the roof
    assert v.healthy and v.unmet == [] and v.findings_above_low == 0
    assert v.kernels_share == kernels.share >= verdict.KERNELS_MIN_SHARE
    placed = sorted((o for o in r.efficiency.operators if o.efficiency_pct is not None and o.us_per_call >= 20),
                    key=lambda o: -o.share_pct)
    assert [(k.op, k.input_shapes) for k in v.kernels] == [(o.name, o.input_shapes) for o in placed[:3]]
    assert all(k.efficiency_pct >= verdict.NEAR_ROOF_PCT for k in v.kernels)
    low, high = min(k.efficiency_pct for k in v.kernels), max(k.efficiency_pct for k in v.kernels)
    assert v.text == (f"healthy: kernels {100 * kernels.share:.0f}% of the step; the top 3 kernels at "
                      f"{low:.0f}-{high:.0f}% of this machine's roofs (aten::addmm); no finding above low")
    assert f"verdict: {v.text}" in terminal.render(r) and f"**Verdict:** {v.text}" in markdown.render(r)


def test_a_kernels_own_internal_copy_is_judged_with_that_kernel_not_against_the_roofs():
    # BERT's addmm writes its broadcast bias into its output first (copy_ called by addmm): 9% of the roof in the
    # recording. Made the largest row, it is still addmm's cost: neither the verdict nor low_efficiency judge it
    r = judged("bert_infer")
    i, copy = next((i, o) for i, o in enumerate(r.efficiency.operators)
                   if o.name == "aten::copy_" and o.input_shapes[0] == [1024, 1024])
    assert copies.internal(r, copy.name, copy.input_shapes) and copy.efficiency_pct < verdict.NEAR_ROOF_PCT
    r.efficiency.operators[i] = dataclasses.replace(copy, share_pct=60.0)
    v = verdict.of(r)
    assert v.healthy and "aten::copy_" not in [k.op for k in v.kernels], v.unmet
    assert not [f for f in low_efficiency(r) if f.op == "aten::copy_"]
    # the same row were it a copy the user's code asks for (called from Python): judged, and not healthy
    r.operators = [dataclasses.replace(o, called_by={"": o.self_cpu_us}) if o.name == "aten::copy_" else o
                   for o in r.operators]
    assert not copies.internal(r, copy.name, copy.input_shapes)
    v = verdict.of(r)
    assert not v.healthy and v.kernels[0].op == "aten::copy_", v.kernels


@pytest.mark.parametrize("change, unmet", [
    (lambda r: [dataclasses.replace(s, share=0.5) if s.name == "kernels" else s for s in r.step_budget.slices],
     "kernels are 50% of the step, under the 70%"),
    (lambda r: r.step_budget.slices, "1 finding medium or higher"),
])
def test_each_unmet_check_keeps_the_healthy_verdict_away(change, unmet):
    r = judged("bert_infer")
    r.step_budget.slices = change(r)
    if "finding" in unmet:
        r.findings[0] = dataclasses.replace(r.findings[0], severity="medium")
    v = verdict.of(r)
    assert not v.healthy and any(unmet in u for u in v.unmet), v.unmet
    assert v.text.startswith("not healthy" if "finding" in unmet else "not called healthy")


def test_without_roofs_or_a_budget_nothing_is_called_healthy():
    r = judged("bert_infer")
    r.efficiency = None
    assert not verdict.of(r).healthy and "efficiency layer" in verdict.of(r).unmet[0]
    r.step_budget = None
    assert "no step budget" in verdict.of(r).unmet[0]


def test_a_doubted_result_is_not_confirmed_never_a_finding_and_says_how_to_re_measure():
    r = judged("gpt2_generate")
    # the recording's lm_head GEMV micro-benchmark was noisy (IQR 33% and 21% of the median): doubted
    (n,) = r.not_confirmed
    assert n.finding.kind == "sequential_operator" and any("noisy" in d for d in n.finding.doubts)
    assert n.reproduce == f"python {n.finding.evidence['reproducer']}"
    assert not any(p.doubts for f in r.findings for p in [f, *f.also])
    assert r.findings[0].kind == "python_overhead"  # it never leads
    assert not r.verdict.healthy and "python_overhead" in r.verdict.text
    text = terminal.render(r)
    assert text.index("Findings") < text.index(fmt.NOT_CONFIRMED_HEAD) < text.index(n.reproduce)
    md = markdown.render(r)
    assert f"### {fmt.NOT_CONFIRMED_HEAD}" in md and f"`{n.reproduce}` (from the report's folder)" in md
    page = html.render(r)
    assert page.index('id="finding-1"') < page.index('id="not-confirmed"') and n.reproduce in page


def test_a_doubt_without_a_reproducer_re_runs_diagnose_and_contended_roofs_are_probed_again():
    r = judged("gpt2_generate")
    f = dataclasses.replace(r.findings[0], evidence={}, op=None, doubts=["noisy"])
    assert verdict.reproduce(r, f) == "diagnose examples/gpt2_generate.py (on a quiet machine)"
    g = dataclasses.replace(f, doubts=[PEAKS_CONTENDED_DOUBT])
    assert verdict.reproduce(r, g).startswith("diagnose probe --refresh && diagnose examples/gpt2_generate.py")


def test_the_budget_bars_add_up_and_a_library_model_gets_a_bar_per_module(tmp_path):
    r = judged("bert_infer")
    modules = fmt.budget_modules(r)
    kernels = next(s for s in r.step_budget.slices if s.name == "kernels")
    # each module's own operators as a share of the step: within the kernels slice, largest first
    assert len(modules) >= 2 and sum(share for _, share in modules) <= kernels.share + 1e-9
    assert [s for _, s in modules] == sorted((s for _, s in modules), reverse=True)
    assert any("intermediate.dense" in label for label, _ in modules)
    page = html.render(r)
    widths = [float(w) for w in re.findall(r'class="seg"[^>]*style="width:([\d.]+)%', page)]
    total = sum(s.share for s in r.step_budget.slices if s.share > 0)
    assert abs(sum(widths) - 100 * min(1.0, total)) < 0.1  # over-counting slices: the bar is their sum
    assert 'id="budget-modules"' in page
    path = tmp_path / "budget.png"
    assert plots.budget_png(r, str(path)) is None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_without_a_budget_draws_no_budget_picture(tmp_path):
    r = judged("bert_infer")
    r.step_budget = None
    assert plots.budget_png(r, str(tmp_path / "b.png")) == "no step budget (nothing timed the step)"
    assert 'id="budget-bar"' not in html.render(r)


def test_a_busy_machine_leaves_the_model_unjudged_and_its_own_finding_leads_the_line():
    r = judged("bert_infer")
    busy = dataclasses.replace(r.findings[0], kind="external_contention", severity="high", location=None)
    r.findings = [busy, *r.findings]
    v = verdict.of(r)
    assert not v.healthy and v.text.startswith("not judged: other processes held this machine's CPUs")
    loud = dataclasses.replace(r.findings[1], kind="python_overhead", severity="medium")
    r.findings = [busy, loud]
    assert verdict.of(r).text.startswith("not healthy: 2 findings medium or higher, led by python_overhead")
