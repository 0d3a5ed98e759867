"""Copies named by what the code wrote, and suggestions by operator class, on recorded reports (tests/data/findings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose import findings
from diagnose.findings import copies, suggestions
from diagnose.findings.operators import copy_overhead
from diagnose.report import io
from diagnose.report.model import OperatorRow, Report, SourceShare, TargetInfo

DATA = Path(__file__).resolve().parents[1] / "data" / "findings"
COPIES = "tests/data/findings/copies.py"
GPT2 = "tests/data/findings/gpt2_generate.py:10"


@pytest.fixture(scope="module")
def copies_report() -> Report:
    return io.load(str(DATA / "copies_report.json"))


def _by_line(origins) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for (kind, loc, _), us in origins.items():
        if us > 0:
            out.setdefault(int(loc.rsplit(":", 1)[1]), set()).add(kind)
    return out


def test_every_copy_of_the_recorded_script_is_named_by_what_its_line_wrote(copies_report):
    # one copy_ row [512,512] holds the copies of lines 9, 10, 11, 17 and 18 with three parents (clone,
    # _to_copy, Python): each line gets only the parents that ran there
    assert _by_line(copies.by_origin(copies_report)) == {
        9: {"contiguous"},           # a = x.t().contiguous()
        10: {"clone"},               # b = x.clone()
        11: {"to"},                  # c = x.to(torch.float64)
        13: {"indexed assignment"},  # out[i] = x[i]
        14: {"internal"},            # out[:, 1:3] = 0.5: fill_'s own copy of the scalar
        17: {"copy_"},               # buf.copy_(x)
        18: {"reshape"},             # d = x.t().reshape(-1)
    }
    us = copies.by_origin(copies_report)
    # copy_ [512,512]'s 1565 µs called from Python all belong to line 17 (the only line without another parent)
    assert us[("copy_", f"{COPIES}:17", "aten::copy_")] == pytest.approx(1565.464)
    assert us[("indexed assignment", f"{COPIES}:13", "aten::copy_")] == pytest.approx(1937.448)


def test_the_copy_finding_counts_what_the_code_asks_for(copies_report):
    (f,) = copy_overhead(copies_report)
    e = f.evidence
    assert set(e["by_kind_us"]) == {"reshape", "to", "contiguous", "clone", "copy_"}
    assert set(e["not_counted_us"]) == {"indexed assignment", "internal to aten::fill_"}
    total = sum(r.self_cpu_us for r in copies_report.operators)
    assert e["share_pct"] == pytest.approx(100 * sum(e["by_kind_us"].values()) / total, abs=1e-3)
    assert (e["copy"], f.location) == ("reshape", f"{COPIES}:18") and "reshape" in f.suggestion


def test_hot_copy_rows_get_the_suggestion_for_what_was_written(copies_report):
    # the [512] copy_ row is line 13's indexed assignment: never told to drop a .contiguous()
    text = suggestions.suggestion_for(copies_report, "aten::copy_", [[512], [512], []], ["float", "float", "Scalar"],
                                      f"{COPIES}:13")
    assert text.startswith("Indexed assignment (out[i] = v)") and ".contiguous()" not in text
    assert copies.row_kind(copies_report, "aten::copy_", [[64, 2], [], []]) == ("internal", "aten::fill_")
    assert "aten::fill_'s own internal copy" in suggestions.suggestion_for(
        copies_report, "aten::copy_", [[64, 2], [], []], [], f"{COPIES}:14")


def test_a_cat_in_a_generation_loop_is_told_to_preallocate_its_cache():
    # GPT-2 generate: the profiler records no member shapes for cat's TensorList ([[], []]), but attention at
    # the same line ran with a key/value length of 9, 10, ..., 23: one token per step
    rep = io.load(str(DATA / "gpt2_generate_report.json"))
    assert suggestions.growth_at(rep, GPT2) == {"op": "aten::_scaled_dot_product_flash_attention_for_cpu",
                                                 "steps": 15, "lo": 9, "hi": 23}
    text = suggestions.suggestion_for(rep, "aten::cat", [[], []], ["TensorList", "Scalar"], GPT2)
    assert "(9 -> 23)" in text and 'cache_implementation="static"' in text
    # a cat elsewhere (no growing shapes at its line) gets the general advice
    other = suggestions.suggestion_for(rep, "aten::cat", [[], []], ["TensorList", "Scalar"], "model.py:3")
    assert "preallocate the output" in other and "static" not in other


def test_two_or_three_shapes_are_not_growth():
    rows = [OperatorRow(name="aten::mm", input_shapes=[[b, 64], [64, 64]], dtypes=["float"] * 2, calls=1,
                        self_cpu_us=10.0, total_cpu_us=10.0, self_pct=1.0, source="m.py:3",
                        sources=[SourceShare("m.py:3", 1, 10.0)]) for b in (31, 32, 33)]
    rep = Report(target=TargetInfo(script="m.py"), operators=rows)
    assert suggestions.growth_at(rep, "m.py:3") is None
    rep.operators.append(OperatorRow(**{**rows[0].__dict__, "input_shapes": [[34, 64], [64, 64]]}))
    assert suggestions.growth_at(rep, "m.py:3")["steps"] == 4


def _row(name, shapes, dtypes=None, strides=None, pct=40.0):
    return OperatorRow(name=name, input_shapes=shapes, dtypes=dtypes or ["float"] * len(shapes), calls=10,
                       self_cpu_us=pct * 100, total_cpu_us=pct * 100, self_pct=pct, source="m.py:5",
                       sources=[SourceShare("m.py:5", 10, pct * 100)], called_by={"": pct * 100},
                       input_strides=strides)


def test_channels_last_for_nchw_convolution_pooling_and_batch_norm():
    nchw = _row("aten::max_pool2d_with_indices", [[8, 64, 56, 56], [], [], [], [], []])
    rep = Report(target=TargetInfo(script="m.py"), operators=[nchw])
    text = suggestions.suggestion_for(rep, nchw.name, nchw.input_shapes, nchw.dtypes, "m.py:5")
    assert "model = model.to(memory_format=torch.channels_last)" in text
    assert "x = x.to(memory_format=torch.channels_last)" in text
    # already channels_last (stride 1 on C), or a single channel: nothing to convert
    nhwc = _row("aten::native_batch_norm", [[8, 64, 56, 56], [64], [64]],
                strides=[[200704, 1, 3584, 64], [1], [1]])
    one_channel = _row("aten::convolution", [[8, 1, 28, 28], [32, 1, 3, 3]])
    rep = Report(target=TargetInfo(script="m.py"), operators=[nhwc, one_channel])
    for r in (nhwc, one_channel):
        assert "channels_last" not in suggestions.suggestion_for(rep, r.name, r.input_shapes, r.dtypes, "m.py:5")
    # a linear layer's 4-D input is not a layout question
    assert "channels_last" not in suggestions.suggestion_for(rep, "aten::add", [[8, 64, 56, 56]], ["float"])


@pytest.mark.parametrize("name, dtypes, needle", [
    ("aten::normal_", ["float"], "weight initialisation"),
    ("aten::sort", ["float"], "torch.topk"),
    ("aten::native_layer_norm", ["float"], "Layer/group norm is memory-bound"),
    ("aten::_softmax", ["float"], "F.scaled_dot_product_attention"),
    ("aten::tanh", ["float"], "F.gelu(x, approximate='tanh')"),
    ("aten::embedding", ["float", "long"], "nn.EmbeddingBag"),
    ("aten::std", ["float"], "torch.var_mean"),
    ("aten::mul", ["double", "double"], "It runs in float64"),
    ("aten::addmm", ["float"], "core compute"),
])
def test_suggestions_by_operator_class(name, dtypes, needle):
    rep = Report(target=TargetInfo(script="m.py"))
    shapes = [[64, 128]] * len(dtypes)
    assert needle in suggestions.suggestion_for(rep, name, shapes, dtypes, "m.py:5")


def test_a_python_scalar_is_not_float64_work():
    rep = Report(target=TargetInfo(script="m.py"))
    assert "float64" not in suggestions.suggestion_for(rep, "aten::div", [[64, 128], []], ["float", "double"])


def test_every_rule_takes_its_operator_advice_from_the_one_table():
    # hot_operator on a softmax and its low_efficiency say the same class-specific thing
    rep = Report(target=TargetInfo(script="m.py"), operators=[_row("aten::_softmax", [[32, 512, 512], [], []]),
                                                              _row("aten::addmm", [[512], [64, 512], [512, 512]])])
    (hot,) = [f for f in findings.derive(rep) if f.op == "aten::_softmax"]
    assert suggestions.TEXT["softmax"] in hot.suggestion
