"""--what-if end to end: planted examples through the real CLI, every variant really run and measured.

examples/no_inference_mode.py records autograd in an inference loop; examples/conv_nchw.py serves a CNN on
NCHW tensors; examples/pointwise_block.py is made of small element-wise operators (torch.compile's case);
examples/graph_breaks.py calls `.item()` inside its forward's loop; examples/mlp.py is the control. Speedups
are this machine's own, and a shared or busy CPU's, so no assertion here is on a measured outcome: they hold
the structure (the fields measured, the verdict the rule makes of the numbers shown, recommended = a win whose
outputs match, a finding for each recommendation) and the structural truths (compile without a compiled graph
is never a win).
"""

from __future__ import annotations

import math

from conftest import EXAMPLES, assert_trial_follows_the_rule, line_of, run_cli


def _what_if(tmp_path, *args: str) -> tuple[dict, dict]:
    run = run_cli("--layers", "operators", *args, outdir=tmp_path / "r", timeout=600)
    assert run.code == 0, run.stderr[-3000:]
    report = run.report
    assert report["what_if"]["estimate_s"] > 0  # announced before it started (a progress line; -q here)
    assert report["layers"]["what_if"]["status"] == "ok", report["layers"]["what_if"]
    return report, {v["name"]: v for v in report["what_if"]["variants"]}


def _measured(v: dict) -> dict:
    t = v["trial"]
    assert t["speedup"] and t["ci_low"] is not None and t["noise_floor_pct"] is not None, t  # rounds: the rule's
    assert v["recommended"] == (t["verdict"] == "win" and v["outputs"]["status"] == "match"), v
    assert_trial_follows_the_rule(t)
    return t


def _findings_follow_the_rule(report: dict) -> None:
    """A what_if finding exists exactly for each recommended variant."""
    found = {f["evidence"]["variant"] for f in report["findings"] if f["kind"] == "what_if"}
    assert found == {v["name"] for v in report["what_if"]["variants"] if v["recommended"]}, report["findings"]


def test_an_inference_loop_gets_the_finding_and_inference_mode_measured(tmp_path):
    # bf16 by name: measured even where the CPU emulates it (no avx512_bf16 on this machine: 2.2x slower here)
    # the script's own --steps 100 ends the window after the default warm-up, as for the compile tests below
    report, variants = _what_if(tmp_path, "--what-if", "inference_mode,bf16", "examples/no_inference_mode.py",
                                "--", "--steps", "100")
    assert any(f["kind"] == "autograd_in_inference" for f in report["findings"])
    v = variants["inference_mode"]
    assert "autograd records a graph" in v["why"]
    t = _measured(v)
    assert v["outputs"]["status"] == "match" and v["outputs"]["rel_diff"] == 0, v["outputs"]  # the same arithmetic
    assert "Sequential output at its call 2" in v["outputs"]["compared"]
    line = f"examples/no_inference_mode.py:{line_of(EXAMPLES / 'no_inference_mode.py', 'out = model(x)')}"
    assert line in t["change"] and "torch.inference_mode()" in t["change"]
    _measured(variants["bf16"])
    bf16 = variants["bf16"]["outputs"]
    assert bf16["tolerance"] == 5e-2 and 0 < bf16["rel_diff"] < 5e-2, bf16  # bf16's rounding, reported
    _findings_follow_the_rule(report)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## What-if" in md and "| inference_mode |" in md


def test_an_nchw_cnn_gets_channels_last_measured(tmp_path):
    # 2 warm-up steps and 5 measured ones, which the script's own --steps 7 ends (else the first pass stretches the
    # window toward 1 s, up to the script's end): every pass and trial round the same short run
    report, variants = _what_if(tmp_path, "--what-if", "channels_last", "--skip-steps", "2", "--steps", "5",
                                "examples/conv_nchw.py", "--", "--steps", "7")
    v = variants["channels_last"]
    assert "convolution on a 4-D NCHW input" in v["why"], v["why"]  # the condition `auto` would run it on
    _measured(v)
    assert v["outputs"]["status"] == "match" and v["outputs"]["rel_diff"] <= 1e-3, v["outputs"]
    _findings_follow_the_rule(report)


# The compile tests' scripts end at their own --steps 100: the window is their 95 steps after the default warm-up
# (the first pass would stretch it toward 1 s), which the operator pass records at ~10x a step and each trial
# round re-runs after its compile. At 400 steps the operator pass of pointwise_block took 7.9 s against 2.4 s
# (a quiet 2-CPU EPYC, 2026-11-28); every assertion here is structural or follows the rule from the numbers shown
COMPILE_STEPS = ("--", "--steps", "100")


def test_compile_of_small_elementwise_blocks_is_measured_with_its_cost(tmp_path):
    report, variants = _what_if(tmp_path, "--what-if", "compile", "examples/pointwise_block.py", *COMPILE_STEPS)
    v = variants["compile"]
    t = _measured(v)
    c = v["compile"]
    assert c["graphs"] >= 1 and c["graph_breaks"] == [] and c["compile_s"] > 0.1, c
    assert v["outputs"]["status"] == "match", v["outputs"]
    # whether it wins is this machine's call (measured 2.5x on an idle EPYC, but a shared or hogged CPU can
    # stretch either side's passes): what cannot flip is that it compiled, so the statistics decide, and that
    # the break-even follows from the numbers shown
    assert t["no_effect"] is None, t
    if t["verdict"] == "win":
        saved = t["baseline_step_s"] - t["variant_step_s"]
        assert c["break_even_steps"] == math.ceil(c["compile_s"] / saved), (c, t)
    else:
        assert c["break_even_steps"] is None, c
    _findings_follow_the_rule(report)


def test_graph_breaks_are_listed_with_their_reason_and_line(tmp_path):
    report, variants = _what_if(tmp_path, "--what-if", "compile", "examples/graph_breaks.py", *COMPILE_STEPS)
    v = variants["compile"]
    _measured(v)
    breaks = v["compile"]["graph_breaks"]
    line = f"examples/graph_breaks.py:{line_of(EXAMPLES / 'graph_breaks.py', 'peak = h.abs()')}"
    assert breaks and breaks[0]["source"].endswith(line) and "item()" in breaks[0]["reason"], breaks
    assert breaks[0]["skipped"]  # a break inside the loop: dynamo runs the whole forward eagerly
    # dynamo compiled no graph (the whole forward runs eagerly): a structural truth decides before any statistic,
    # so a noisy A/B can never call it a win (it once did, on a quiet EPYC: issue 34)
    assert v["compile"]["graphs"] == 0 and v["trial"]["verdict"] == "no gain", v
    assert v["trial"]["no_effect"]["reason"] == "no compiled graph" and not v["recommended"], v["trial"]
    text = run_cli("--load", str(tmp_path / "r" / "report.json")).stdout
    assert "graph break at" in text and line in text
    assert "no compiled graph: compile changes nothing here" in text


def test_the_control_gets_no_recommendation_that_was_not_measured(tmp_path):
    # 2 warm-up steps and 8 measured ones, which the script's own --steps 10 ends: every pass the same short run
    report, variants = _what_if(tmp_path, "--what-if", "auto", "--skip-steps", "2", "--steps", "8", "examples/mlp.py",
                                "--", "--steps", "10")
    skipped = {s["name"]: s["reason"] for s in report["what_if"]["skipped"]}
    assert "break training" in skipped["inference_mode"]  # a backward runs
    assert "NCHW" in skipped["channels_last"] and "subnormal" in skipped["flush_denormal"]
    assert set(variants) == {"compile"} | ({"bf16"} if "bf16" not in skipped else set())
    for v in variants.values():
        _measured(v)
    _findings_follow_the_rule(report)


def test_a_float64_model_gets_the_dtype_finding_and_float32_measured(tmp_path):
    from diagnose.findings.dtypes import float64_pct
    from diagnose.report import io as report_io
    from diagnose.whatif import variants as variants_mod

    # the script's own --steps 12 ends each pass with the window (else the first pass stretches it to 1 s)
    report, variants = _what_if(tmp_path, "--what-if", "float32", "--skip-steps", "2", "--steps", "10",
                                "examples/float64_train.py", "--", "--steps", "12")
    typed = report_io.from_json_data(report)
    # `auto` runs float32 because the dtype finding's condition holds (named here to skip bf16 and compile)
    assert "float32" in [c.name for c in variants_mod.choose(typed, ["auto"])[0]]
    dtype = next(f for f in report["findings"] if f["kind"] == "dtype")
    script = EXAMPLES / "float64_train.py"
    double = f"examples/float64_train.py:{line_of(script, 'model = model.double()')}"
    numpy = f"examples/float64_train.py:{line_of(script, 'inputs = torch.from_numpy(features)')}"
    # the rule says high; the measured float32 saving bounds it (stake.settle): a fresh clone on the Xeon measured
    # 18.6% (16.9-20.5%) of the step and the finding was medium, borderline high, as the rule says it should be
    assert dtype["location"] == double and (dtype["rule_severity"] or dtype["severity"]) == "high", dtype
    if dtype["severity"] != "high":
        assert dtype["severity_basis"] and dtype["stake"]["low"] < 20, dtype
    ev = dtype["evidence"]
    # every operator of the step computes on float64 tensors (the rule's 10% threshold, passed tenfold)
    assert ev["float64_share_pct"] >= 90 and ev["float64_share_pct"] == round(float64_pct(typed), 2), ev
    origins = {(o["source"], o["how"]): o for o in ev["origins"]}
    assert origins[(double, ".double()")]["parameters"] == 6, origins  # 3 Linear layers: weight and bias each
    assert (numpy, "torch.from_numpy of a float64 array") in origins, origins
    assert ".double()" in dtype["suggestion"] and "torch.from_numpy" in dtype["suggestion"]
    v = variants["float32"]
    t = _measured(v)
    assert "float64 operators take" in v["why"] and double in t["change"], v
    # float32 against float64: different rounding, well within the tolerance (3e-7 here)
    assert v["outputs"]["status"] == "match" and 0 < v["outputs"]["rel_diff"] <= 1e-3, v["outputs"]
    # not asserted faster: float32 GEMMs run twice the SIMD lanes of float64 and measured 2.0-3.7x on one EPYC,
    # but 1.00x on this loaded AMD EPYC on 2026-11-25 (the plain script's steps took 200 ms there, main's code and
    # this branch's alike), so the margin is not there on every CPU; the finding carries what was measured
    assert ev["float32"]["speedup"] == t["speedup"]
    # a win is the dtype finding's stake, not a what_if finding of its own
    assert not any(f["kind"] == "what_if" and f["evidence"]["variant"] == "float32" for f in report["findings"])
    if v["recommended"]:
        # the measured gain, unless it exceeds the step budget's slice its time is part of (stake.bound caps it
        # and says so: 91.5% of kernels against a measured 96.6% was seen)
        gain = round(100 * (1 - 1 / t["speedup"]), 1)
        assert dtype["stake"]["pct"] == gain or (dtype["stake"]["pct"] < gain
                                                 and "at most the step budget's" in dtype["stake"]["basis"]), dtype
    else:
        assert "--what-if float32 measured" in dtype["stake"]["basis"], dtype["stake"]


def test_compile_of_a_training_step_with_dropout_is_compared_on_eagers_random_numbers(tmp_path):
    # by default inductor draws dropout's masks from its own generator: this step's outputs were 0.72 apart
    # (BERT training's 0.18), so compile could never be recommended on a training step with dropout. With
    # inductor's fallback_random the masks are eager's, and the outputs match (0.0 here)
    report, variants = _what_if(tmp_path, "--what-if", "compile", "tests/data/whatif/dropout_train.py",
                                *COMPILE_STEPS)
    v = variants["compile"]
    _measured(v)
    assert v["compile"]["graphs"] >= 1, v["compile"]
    assert v["outputs"]["status"] == "match" and v["outputs"]["rel_diff"] <= 1e-3, v["outputs"]
    assert any("fallback_random" in n for n in report["what_if"]["notes"]), report["what_if"]["notes"]
    _findings_follow_the_rule(report)
