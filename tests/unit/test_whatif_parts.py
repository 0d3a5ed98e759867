"""--what-if's parts on inputs built in code: which variants apply and why, the output comparison (real torch
tensors, as the passes compare them), the recommendation rule, the finding and the renderers;
tests/e2e/test_whatif.py runs them on real scripts."""

from __future__ import annotations

import torch

from diagnose.protocol import OutputDiff, WhatIfPass
from diagnose.findings.whatif import what_if
from diagnose.report.model import (
    Autograd,
    DoctorCheck,
    Doctor,
    Modules,
    OperatorRow,
    OutputCheck,
    RecordingLine,
    Report,
    Steps,
    TargetInfo,
    Trial,
    WhatIf,
    WhatIfVariant,
)
from diagnose.whatif import outputs, variants


def _cpuinfo(tmp_path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    return str(path)


def _inference_report() -> Report:
    r = Report(target=TargetInfo(script="serve.py"))
    r.modules = Modules(root_class="Sequential")
    r.steps = Steps(detector="forward", detail="Sequential forward", steps_seen=30)
    r.autograd = Autograd(calls=400, recording_calls=380, backward_ops=0, lines=[RecordingLine("serve.py:12", 380)])
    return r


def test_auto_picks_inference_mode_and_compile_for_an_eager_inference_loop(tmp_path):
    chosen, skipped = variants.choose(_inference_report(), ["auto"], _cpuinfo(tmp_path, "fpu sse avx2"))
    assert [c.name for c in chosen] == ["inference_mode", "compile"]
    assert "serve.py:12" in chosen[0].change and "torch.inference_mode()" in chosen[0].change
    why = {s.name: s.reason for s in skipped}
    assert "no native bf16" in why["bf16"] and "NCHW" in why["channels_last"] and "subnormal" in why["flush_denormal"]
    # named, a variant runs whatever its condition says, unless it would change nothing or break the run
    chosen, skipped = variants.choose(_inference_report(), ["bf16", "channels_last", "flush_denormal"],
                                      _cpuinfo(tmp_path, "avx2"))
    assert [c.name for c in chosen] == ["bf16", "flush_denormal"]
    assert [s.name for s in skipped] == ["channels_last"]


def test_training_never_gets_inference_mode_even_when_asked(tmp_path):
    r = _inference_report()
    r.steps.detector = "optimizer"
    r.autograd.backward_ops = 120
    chosen, skipped = variants.choose(r, ["inference_mode", "bf16"], _cpuinfo(tmp_path, "avx2"))
    assert [c.name for c in chosen] == ["bf16"]  # asked for: measured although emulated here
    assert chosen[0].why.startswith("asked for (--what-if)") and "no native bf16" in chosen[0].why
    assert skipped[0].name == "inference_mode" and "break training" in skipped[0].reason


def test_channels_last_needs_an_nchw_convolution_and_bf16_native_instructions(tmp_path):
    r = _inference_report()
    r.autograd.recording_calls = 0
    r.operators = [OperatorRow("aten::mkldnn_convolution", [[16, 3, 64, 64], [64, 3, 3, 3]], ["float"], 10, 1e4,
                               1e4, 40.0, "cnn.py:30", contiguous=[True, True])]
    chosen, _ = variants.choose(r, ["auto"], _cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert [c.name for c in chosen] == ["channels_last", "bf16", "compile"]
    assert "[16, 3, 64, 64]" in chosen[0].why and "avx512_bf16" in chosen[1].why
    r.operators[0].contiguous = [False, True]  # already channels_last
    assert "channels_last" not in [c.name for c in variants.choose(r, ["auto"], _cpuinfo(tmp_path, "avx2"))[0]]


def test_nothing_but_flush_denormal_applies_without_a_module(tmp_path):
    r = Report(target=TargetInfo(script="f.py"))
    r.doctor = Doctor(checks=[DoctorCheck("denormals", "warn", "Subnormal weights in 0.weight.")])
    chosen, skipped = variants.choose(r, ["auto"], _cpuinfo(tmp_path, "avx2"))
    assert [c.name for c in chosen] == ["flush_denormal"]
    assert all("no nn.Module ran" in s.reason for s in skipped)


def test_outputs_match_within_tolerance_and_differ_beyond_it():
    base = [torch.linspace(-2, 2, 1000), torch.ones(3, 4)]
    close = outputs.difference([base[0] + 1e-5, base[1]], base)
    assert abs(close.max_abs_diff - 1e-5) < 2e-6 and close.rel_diff < 1e-5
    assert outputs.check(WhatIfPass(diff=close), 1e-3, "m", None).status == "match"
    bf16 = outputs.difference([base[0].to(torch.bfloat16).float(), base[1]], base)
    assert 1e-3 < bf16.rel_diff < 5e-2  # bf16 rounding: beyond fp32's tolerance, within bf16's
    assert outputs.check(WhatIfPass(diff=bf16), 1e-3, "m", None).status == "differ"
    assert outputs.check(WhatIfPass(diff=bf16), 5e-2, "m", None).status == "match"
    shape = outputs.check(WhatIfPass(diff=outputs.difference([base[0][:10], base[1]], base)), 1e-3, "m", None)
    assert shape.status == "differ" and "shapes" in shape.reason
    nan = outputs.difference([torch.tensor([float("nan"), 1.0])], [torch.tensor([float("nan"), 1.0])])
    assert nan == OutputDiff(max_abs_diff=0.0, rel_diff=0.0)
    assert outputs.check(WhatIfPass(), 1e-3, "m", None).status == "unchecked"


def test_a_baseline_that_differs_from_itself_leaves_every_output_unchecked():
    a, b = [torch.randn(100)], [torch.randn(100)]
    why = outputs.self_check(WhatIfPass(captured="m", diff=outputs.difference(a, b)))
    assert why and "differ between runs" in why
    assert outputs.self_check(WhatIfPass(captured="m", diff=outputs.difference(a, a))) is None
    assert "kept no output" in outputs.self_check(WhatIfPass())
    c = outputs.check(WhatIfPass(diff=outputs.difference(a, a)), 1e-3, "m", why)
    assert c.status == "unchecked" and c.reason == why


def _variant(name, verdict, status, speedup=1.25):
    t = Trial(name, "what_if", f"wrap it ({name})", rounds=3, baseline_step_s=0.01, variant_step_s=0.01 / speedup,
              speedup=speedup, ci_low=speedup - 0.05, ci_high=speedup + 0.05, noise_floor_pct=2.0, verdict=verdict)
    return WhatIfVariant(name, "why", t, OutputCheck(status, rel_diff=0.0, tolerance=1e-3),
                         recommended=verdict == "win" and status == "match")


def test_only_a_measured_win_with_matching_outputs_becomes_a_finding():
    r = Report(target=TargetInfo(script="s.py"))
    r.what_if = WhatIf(requested=["auto"], variants=[
        _variant("inference_mode", "win", "match"), _variant("bf16", "win", "differ", 1.6),
        _variant("compile", "no gain", "match", 1.01)])
    found = what_if(r)
    assert len(found) == 1 and found[0].kind == "what_if"
    assert "inference_mode" in found[0].title and "1.25x" in found[0].title and "1.20-1.30x" in found[0].title
    assert found[0].stake.pct == 20.0
    assert found[0].suggestion.startswith("Wrap it (inference_mode)")


def test_the_what_if_table_renders_in_terminal_markdown_and_html():
    from diagnose.render import html, markdown, terminal
    from diagnose.report.model import CompileCost, GraphBreakAt, LayerStatus, WhatIfSkipped

    r = Report(target=TargetInfo(script="s.py"))
    r.layers["what_if"] = LayerStatus("ok")
    compiled = _variant("compile", "slower", "match", 0.8)
    compiled.compile = CompileCost(compile_s=4.2, compile_s_warm=1.5, graphs=0, graph_breaks=[
        GraphBreakAt("Unsupported Tensor.item() call with capture_scalar_outputs=False", "s.py:38", 1, True)])
    r.what_if = WhatIf(requested=["auto"], variants=[_variant("inference_mode", "win", "match"), compiled],
                       skipped=[WhatIfSkipped("bf16", "this CPU has no native bf16")], estimate_s=6.0, elapsed_s=9.5)
    r.findings = what_if(r)
    text = terminal.render(r)
    assert "What-if" in text and "recommended" in text and "tried: slower" in text
    assert "graph break at s.py:38 (dynamo gave up on the whole function: it runs eagerly)" in text
    assert "compile 4.20 s (1.50 s with a warm cache)" in text and "not run: bf16" in text
    md = markdown.render(r)
    assert "## What-if" in md and "| inference_mode | 10.00 ms | 8.00 ms | 1.25x | 1.20-1.30x |" in md
    page = html.render(r)
    section = page.split('<section id="what_if">', 1)[1].split("</section>", 1)[0]
    assert "<table" in section and "inference_mode" in section and "item() call" in section
