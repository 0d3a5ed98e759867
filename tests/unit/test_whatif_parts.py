"""--what-if's parts on inputs built in code: which variants apply and why, the output comparison (real torch
tensors, as the passes compare them), the recommendation rule, the finding and the renderers;
tests/e2e/test_whatif.py runs them on real scripts."""

from __future__ import annotations

import torch

from diagnose import protocol
from diagnose.doctor import trials
from diagnose.doctor.workload import check_denormals
from diagnose.protocol import OutputDiff, WhatIfPass, WhatIfSpec
from diagnose.findings.whatif import what_if
from diagnose.report.model import (
    Autograd,
    Compile,
    GraphBreakAt,
    DoctorCheck,
    Doctor,
    Modules,
    OperatorRow,
    OutputCheck,
    ProcessFacts,
    RecordingLine,
    Report,
    Steps,
    SubnormalScan,
    TargetInfo,
    Trial,
    WhatIf,
    WhatIfVariant,
)
from diagnose.whatif import outputs, variants
from diagnose.whatif.child import WhatIfChild


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


def test_compile_without_a_compiled_graph_changes_nothing():
    skipped = GraphBreakAt("Unsupported Tensor.item() call", "/x/graph_breaks.py:38", 1, skipped=True)
    eager = [WhatIfPass(variant="compile", compile=Compile(frames=2, graphs=0), graph_breaks=[skipped])
             for _ in range(3)]
    none = variants.no_effect("compile", _inference_report(), eager)
    assert none is not None and none.reason == "no compiled graph"
    assert "0 graphs in each of the 3" in none.evidence and "given up on the whole function" in none.evidence
    compiled = [*eager[:2], WhatIfPass(variant="compile", compile=Compile(frames=2, graphs=1))]
    assert variants.no_effect("compile", _inference_report(), compiled) is None  # one run compiled: measure
    unread = [*eager[:2], WhatIfPass(variant="compile", compile=Compile(error="counters unreadable"))]
    assert variants.no_effect("compile", _inference_report(), unread) is None  # not known: measure
    assert variants.no_effect("compile", _inference_report(), [None, None, None]) is None


def test_inference_mode_changes_nothing_where_autograd_recorded_nothing():
    r = _inference_report()
    assert variants.no_effect("inference_mode", r, []) is None  # 380 recording calls
    r.autograd.recording_calls, r.autograd.grad_mode_off_calls = 0, 400
    none = variants.no_effect("inference_mode", r, [])
    assert none.reason == "autograd recorded nothing" and "0 of the 400 torch calls" in none.evidence
    r.autograd = None  # the operator pass did not run: nothing known
    assert variants.no_effect("inference_mode", r, []) is None


def test_flush_denormal_changes_nothing_where_no_subnormal_was_seen():
    r = _inference_report()
    assert variants.no_effect("flush_denormal", r, []) is None  # no doctor: nothing known
    r.doctor = Doctor(process=ProcessFacts(subnormal_scope="parameters of Sequential",
                                           subnormals=[SubnormalScan("0.weight", [8, 8], "float32", 64, 64, 0)]))
    r.doctor.checks = [check_denormals(r)]
    assert variants.no_effect("flush_denormal", r, []) == trials.no_effect("denormals", r.doctor.checks)
    assert variants.no_effect("flush_denormal", r, []).reason == "no subnormal values"


def _channels_last_pass(tmp_path, model, x) -> WhatIfPass:
    """A real channels_last what-if child on `model`, called three times on `x`, as a pass runs it."""
    tmp_path.mkdir()
    child = WhatIfChild(torch, WhatIfSpec("channels_last", str(tmp_path)), "trial-0-channels_last")
    child.install()
    try:
        for _ in range(3):
            model(x)
    finally:
        child._handle.remove()
    child.write(None)  # the file the what-if layer reads back
    return protocol.read_result(str(tmp_path / "trial-0-channels_last.json"), WhatIfPass)


def test_channels_last_that_converts_no_tensor_changes_nothing(tmp_path):
    mlp = _channels_last_pass(tmp_path / "a", torch.nn.Sequential(torch.nn.Linear(8, 8)), torch.randn(2, 8))
    assert mlp.applied.startswith("channels_last applied") and mlp.converted == 0
    none = variants.no_effect("channels_last", _inference_report(), [mlp] * 3)
    assert none.reason == "no tensor converted" and "no 4-D parameter" in none.evidence
    cnn = _channels_last_pass(tmp_path / "b", torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), torch.randn(2, 3, 8, 8))
    assert cnn.converted == 1 + 2  # the 4-D weight, and the input at the calls with the change applied
    assert variants.no_effect("channels_last", _inference_report(), [cnn] * 3) is None
    ready = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).to(memory_format=torch.channels_last)
    assert _channels_last_pass(tmp_path / "c", conv, ready).converted == 0  # channels-last already


def test_a_variant_that_changes_nothing_renders_its_reason():
    from diagnose.render import fmt, terminal
    from diagnose.report.model import LayerStatus, NoEffect

    r = Report(target=TargetInfo(script="s.py"))
    r.layers["what_if"] = LayerStatus("ok")
    v = _variant("compile", "no gain", "match", 1.4)
    v.trial.no_effect = NoEffect("no compiled graph", "torch._dynamo compiled 0 graphs in each of the 3 compile runs")
    r.what_if = WhatIf(requested=["compile"], variants=[v])
    assert fmt.what_if_rows(r)[1][-1] == "no gain (no compiled graph)"
    assert "compile: no compiled graph: compile changes nothing here (torch._dynamo compiled 0" in terminal.render(r)
    assert not what_if(r)
