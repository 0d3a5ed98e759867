"""Advice by what an operator is (issue 32): quantised GEMMs, autocast's casts, GEMMs already in bfloat16, weight
initialisation, and rates over spans too short to hold them; on the recorded gallery reports (tests/data/findings)
and on rows built here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from diagnose import findings
from diagnose.findings import copies, suggestions
from diagnose.findings.microbench import sequential_operator
from diagnose.findings.operators import (
    CHURN_MIN_SPAN_S,
    copy_overhead,
    hot_operator,
    memory_churn,
)
from diagnose.opkinds import COMPUTE_CLASSES, low_precision, op_class, weight_init
from diagnose.report import io
from diagnose.report.model import IterationStats, MicrobenchRow, OperatorRow, Steps

DATA = Path(__file__).resolve().parents[1] / "data" / "findings"
ELEMENTWISE = suggestions.TEXT["elementwise"]
TRY_BF16 = "torch.autocast('cpu', dtype=torch.bfloat16)"


def every_finding(report):
    def flat(fs):
        for f in fs:
            yield f
            yield from flat(f.also)
    return list(flat(findings.derive(report)))


@pytest.mark.parametrize("name, kind", [
    ("quantized::linear_dynamic", "quantized_matmul"),
    ("quantized::linear", "quantized_matmul"),
    ("quantized::linear_relu", "quantized_matmul"),
    ("onednn::qlinear_pointwise", "quantized_matmul"),
    ("onednn::qlinear_pointwise.tensor", "quantized_matmul"),
    ("quantized::conv2d.new", "quantized_convolution"),
    ("quantized::linear_prepack", "weight_packing"),
    ("quantized::conv2d_prepack", "weight_packing"),
    ("aten::quantize_per_tensor", "quantize"),
    ("aten::dequantize", "quantize"),
    ("aten::addmm", "matmul"),
    ("aten::uniform_", "rng"),
    ("aten::mul", "elementwise"),
])
def test_the_one_table_classifies_quantised_operators(name, kind):
    assert op_class(name) == kind
    assert (kind in COMPUTE_CLASSES) == (kind in ("quantized_matmul", "quantized_convolution", "matmul"))


def test_low_precision_reads_the_tensor_inputs_only():
    assert low_precision([[4096], [64, 1024], [1024, 4096], [], []], ["c10::BFloat16"] * 3 + ["Scalar"] * 2) \
        == "bfloat16"
    assert low_precision([[64, 1024], [1024, 64]], ["c10::Half", "c10::Half"]) == "float16"
    assert low_precision([[64, 1024], [1024, 64]], ["float", "float"]) is None
    assert low_precision([[64, 1024], []], ["float", "c10::BFloat16"]) is None  # a 0-d value is no tensor input


def test_weight_initialisation_is_in_place_rng_outside_any_forward_less_than_once_a_step():
    assert weight_init("aten::uniform_", None, 2, 6)  # nn.Linear's kaiming_uniform_ while the model is built
    assert weight_init("aten::normal_", None, 1, None)  # no steps: the whole run was recorded, set-up with it
    assert not weight_init("aten::uniform_", None, 6, 6)  # once a step: the loop's own
    assert not weight_init("aten::bernoulli_", "encoder.dropout", 2, 6)  # inside a forward: dropout
    assert not weight_init("aten::randn", None, 1, 6)  # out of place: an input drawn, not a weight filled
    assert not weight_init("aten::addmm", None, 1, 6)


# ------------------------------------------------------------------------------------ recorded: int8 GEMM

@pytest.fixture(scope="module")
def quantized():
    return io.load(str(DATA / "quantized_linear_report.json"))


def test_a_quantised_gemm_gets_gemm_advice_never_elementwise(quantized):
    gemms = [r for r in quantized.operators if r.name == "quantized::linear_dynamic"]
    assert len(gemms) == 2 and all(r.module in ("0", "2") and r.module_class == "Linear" for r in gemms)
    assert sum(r.self_pct for r in gemms) >= 30  # the two GEMMs: the model's work (ReLU's share varies with load)
    # first in the table, a quantised GEMM is the core compute's one low observation, as a float GEMM is
    first = dataclasses.replace(quantized, operators=sorted(quantized.operators, key=lambda r: r.name[0] != "q"))
    (hot, *_) = hot_operator(first)
    assert hot.op == "quantized::linear_dynamic" and hot.severity == "low" and hot.observation, hot
    for f in every_finding(quantized) + every_finding(first):
        if f.op and op_class(f.op) == "quantized_matmul":
            assert ELEMENTWISE not in f.suggestion and "Fuse chains" not in f.suggestion, f
            assert "int8 GEMM" in f.suggestion and "torch.set_num_threads" in f.suggestion


def test_the_quantised_models_steps_are_its_forwards_not_the_observers(quantized):
    st = quantized.steps
    assert st.detector == "forward" and st.detail == "Sequential forward" and st.batch_size == 64
    assert any("MinMaxObserver x2" in n for n in st.notes), st.notes


# --------------------------------------------------------------------------------- recorded: autocast bf16

@pytest.fixture(scope="module")
def autocast():
    return io.load(str(DATA / "autocast_weights_report.json"))


def _weight_rows(report):
    return [r for r in report.operators if r.name == "aten::copy_" and r.input_shapes[0] in ([4096, 1024], [1024, 4096])]


def test_autocast_weight_casts_are_named_as_such_with_the_fix(autocast):
    rows = _weight_rows(autocast)
    assert len(rows) == 2 and all(r.dtypes[:2] == ["c10::BFloat16", "float"] for r in rows)
    for r in rows:
        assert copies.row_kind(autocast, r.name, r.input_shapes) == ("autocast", "aten::linear")
        assert not copies.internal(autocast, r.name, r.input_shapes)
        text = suggestions.suggestion_for(autocast, r.name, r.input_shapes, r.dtypes, r.source)
        assert text.startswith("This is autocast casting aten::linear's float32 weight")
        assert "model.to(torch.bfloat16)" in text and "out of the loop" in text
        assert "internal copy" not in text and "contiguous inputs" not in text
    named = [f for f in every_finding(autocast) if f.kind == "hot_operator" and f.op == "aten::copy_"
             and f.evidence["input_shapes"][0] in ([4096, 1024], [1024, 4096])]
    assert named and all("autocast casting" in f.suggestion and not f.observation for f in named)


def test_copy_overhead_counts_autocasts_casts(autocast):
    (f,) = copy_overhead(autocast)
    assert f.evidence["copy"] == "autocast" and "autocast" in f.evidence["by_kind_us"]
    assert "model.to(torch.bfloat16)" in f.suggestion
    weights = sum(r.self_cpu_us for r in _weight_rows(autocast))
    assert f.evidence["by_kind_us"]["autocast"] >= weights * 0.99  # the weight casts, at least


def test_no_bfloat16_gemm_is_told_to_try_bfloat16(autocast):
    gemms = [r for r in autocast.operators if r.name == "aten::addmm"]
    assert gemms and all(low_precision(r.input_shapes, r.dtypes) == "bfloat16" for r in gemms)
    for r in gemms:
        text = suggestions.suggestion_for(autocast, r.name, r.input_shapes, r.dtypes, r.source)
        assert TRY_BF16 not in text and "already in bfloat16" in text
    for f in every_finding(autocast):
        if f.op and low_precision(f.evidence.get("input_shapes") or [], f.evidence.get("dtypes") or []):
            assert TRY_BF16 not in f.suggestion and "bfloat16 weights halve" not in f.suggestion, f


def test_a_bfloat16_gemms_bandwidth_advice_does_not_offer_bfloat16():
    bf16 = suggestions.bandwidth_text((2, 8000, 256), [[2, 256], [256, 8000]], ["c10::BFloat16"] * 2)
    fp32 = suggestions.bandwidth_text((2, 8000, 256), [[2, 256], [256, 8000]], ["float"] * 2)
    assert "bfloat16 weights halve" in fp32 and "bfloat16 weights halve" not in bf16 and "int8" in bf16


# -------------------------------------------------------------------------------- built: init, short spans

def _report_with(rows, steps=None, **run):
    report = io.load(str(DATA / "quantized_linear_report.json"))
    report = dataclasses.replace(report, operators=rows, steps=steps, microbenchmarks=[])
    for k, v in run.items():
        setattr(report.run, k, v)
    return report


def _row(name, shapes, pct, module=None, calls=2):
    return OperatorRow(name=name, input_shapes=shapes, dtypes=["float"] * len(shapes), calls=calls,
                       self_cpu_us=pct * 1000, total_cpu_us=pct * 1000, self_pct=pct, module=module, source="t.py:3")


def test_weight_initialisation_is_never_a_sequential_operator():
    init = _row("aten::uniform_", [[4096, 1024]], 40.0)
    steps = Steps(detector="forward", steps_seen=6, full_run=True)
    bench = [MicrobenchRow(op="aten::uniform_", input_shapes=[[4096, 1024]], dtypes=["float"], threads=t,
                           median_us=12000.0, iqr_us=100.0, self_pct=40.0) for t in (1, 2)]
    report = dataclasses.replace(_report_with([init], steps), microbenchmarks=bench)
    assert suggestions.weight_init_row(report, init)
    assert sequential_operator(report) == []
    (hot,) = hot_operator(report)
    assert hot.severity == "low" and hot.observation
    # the same operator once a step is the loop's: judged as any other
    loop = dataclasses.replace(init, calls=6)
    report = dataclasses.replace(report, operators=[loop])
    assert [f.kind for f in sequential_operator(report)] == ["sequential_operator"]


def test_in_function_mode_init_is_judged_against_the_calls_the_profiler_recorded():
    # --steps 20 --profile-iters 5: the rows count 5 calls, so an in-place fill once a call is the function's own
    # work, not set-up (judged against the 20 timed calls it looked like init)
    once_a_call = _row("aten::uniform_", [[4096, 1024]], 40.0, calls=5)
    report = _report_with([once_a_call], instrumented_iterations=IterationStats(
        n=5, median_s=0.01, q1_s=0.01, q3_s=0.01, min_s=0.01, max_s=0.01))
    report = dataclasses.replace(report, target=dataclasses.replace(
        report.target, mode="function", function="step", warmup=3, iters=20))
    assert report.timed_steps() == 20 and report.profiled_steps() == 5
    assert not suggestions.weight_init_row(report, once_a_call)
    assert suggestions.weight_init_row(report, dataclasses.replace(once_a_call, calls=1))


def test_a_kernel_torch_compile_generated_is_never_told_to_fuse_with_torch_compile():
    # a compiled training step's fused backward kernel (kernel profile on): 13% of operator time. It read "[medium]
    # hot_operator ... on scalars" with "Fuse chains of them (torch.compile)": a compiled kernel, told to compile
    name = "graph_0_cpp_fused_add_gelu_native_layer_norm_2"
    assert op_class(name) == op_class("cpp_fused_add_gelu_0") == "compiled" and op_class("aten::relu") != "compiled"
    fused = OperatorRow(name=name, input_shapes=[], dtypes=[], calls=40, self_cpu_us=13_000.0,
                        total_cpu_us=13_000.0, self_pct=13.0, module="Net (compiled)", source="t.py:27")
    report = _report_with([fused, _row("aten::mm", [[2048, 128], [128, 512]], 87.0)])
    (f,) = [f for f in hot_operator(report) if f.op == name]
    assert f.severity == "low" and f.observation and f.title.startswith(f"{name} takes 13%"), f.title
    assert "torch.compile generated" in f.suggestion and ELEMENTWISE not in f.suggestion
    # a fused loop holding most of the time is still worth a look, as an activation's would be: medium (its share's
    # interval, from this recording's noise, clear of the 30% line)
    report.operators[0] = dataclasses.replace(fused, self_pct=70.0)
    (g,) = [f for f in hot_operator(report) if f.op == name]
    assert g.severity == "medium" and not g.observation and g.borderline is None, g
    # one whose loop draws dropout's random numbers (a compiled training step's: 13.7 ms a call for 1M elements)
    # pays a generator step per element: judged as any other operator, with that cost named
    rng = "graph_0_cpp_fused_native_dropout_relu_threshold_backward_view_9"
    assert op_class(rng) == op_class("cpp_fused_bernoulli_0") == "compiled_rng"
    report.operators[0] = dataclasses.replace(fused, name=rng, self_pct=20.0)
    (h,) = [f for f in hot_operator(report) if f.op == rng]
    assert h.severity == "medium" and not h.observation and "random numbers" in h.suggestion, h


def test_no_allocation_rate_over_a_span_that_cannot_hold_it():
    report = _report_with([_row("aten::empty_like", [[64, 4096]], 50.0)])
    report.operator_summary = dataclasses.replace(report.operator_summary, total_self_cpu_us=1_050_000.0)
    report.operator_summary.memory.allocated_bytes = 1 << 29
    report.run.instrumented_wall_s = 0.008  # the "0.5 GiB allocated in 0.00 s (205.8 GiB/s)"
    assert memory_churn(report) == []
    report.run.instrumented_wall_s = CHURN_MIN_SPAN_S / 2
    report.operator_summary.total_self_cpu_us = 0.0
    assert memory_churn(report) == []  # shorter than the printed resolution
    report.run.instrumented_wall_s = 0.2  # shorter than half of the 1.05 s of operators recorded in it
    report.operator_summary.total_self_cpu_us = 1_050_000.0
    assert memory_churn(report) == []
    report.run.instrumented_wall_s = 1.2  # the same span holding the operators: its rate is reported, over the
    report.operator_summary.memory.allocated_bytes = 2 << 30  # time the uninstrumented pass took for that run
    (f,) = memory_churn(report)
    wall = report.run.wall_s
    assert f.evidence["span_s"] == round(wall, 4) and f.evidence["bytes_per_s"] == round((2 << 30) / wall)
