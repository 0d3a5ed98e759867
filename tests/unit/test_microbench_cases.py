"""microbench.cases: report rows -> runnable cases, on a real recorded report (examples/mlp.py:step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from microbench import cases as C  # noqa: E402
from microbench.errors import UsageError  # noqa: E402

REPORT = Path(__file__).resolve().parents[1] / "data" / "microbench" / "report_mlp_step.json"


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def row_of(report: dict, name: str, shapes: list) -> dict:
    return next(r for r in report["operators"] if r["name"] == name and r["input_shapes"] == shapes)


def run_case(case: C.Case):
    ns = C.namespace(case)
    return eval(case.stmt(), ns), ns


# --------------------------------------------------------------------------
# Rows -> cases
# --------------------------------------------------------------------------

def test_mm_row(report):
    case = C.case_from_row(row_of(report, "aten::mm", [[256, 1024], [1024, 1024]]))
    assert case.op == "aten::mm" and case.overload == "default"
    assert case.stmt() == "torch.ops.aten.mm.default(x0, x1)"
    assert case.dtypes == ["float", "float"]
    assert case.source == "examples/mlp.py:30" and case.self_pct == pytest.approx(9.495)
    assert case.contiguous and case.strides is None
    assert "no strides" in case.layout
    assert case.assumed_args == {}
    out, ns = run_case(case)
    assert out.shape == (256, 1024) and ns["x0"].dtype == torch.float32 and ns["x0"].is_contiguous()


def test_addmm_row_uses_schema_defaults_and_says_so(report):
    case = C.case_from_row(row_of(report, "aten::addmm", [[1024], [256, 1024], [1024, 1024], [], []]))
    assert case.stmt() == "torch.ops.aten.addmm.default(x0, x1, x2, beta=1, alpha=1)"
    assert case.assumed_args == {"beta": 1, "alpha": 1}
    assert [t.shape for t in case.tensors] == [[1024], [256, 1024], [1024, 1024]]


def test_scalars_where_shapes_are_empty(report):
    case = C.case_from_row(row_of(report, "aten::threshold_backward", [[256, 1024], [256, 1024], []]))
    assert case.stmt() == "torch.ops.aten.threshold_backward.default(x0, x1, 0)"
    assert case.assumed_args == {"threshold": 0}
    case = C.case_from_row(row_of(report, "aten::add_", [[1024, 512], [1024, 512], []]))
    assert case.overload == "Tensor"                       # not add_.Scalar: the 2nd input is a tensor
    assert case.stmt() == "torch.ops.aten.add_.Tensor(x0, x1, alpha=1)"


def test_scalar_list_and_optional(report):
    case = C.case_from_row(row_of(report, "aten::sum", [[256, 1024], [], [], []]))
    assert case.overload == "dim_IntList"
    assert case.stmt() == "torch.ops.aten.sum.dim_IntList(x0, [0], False, dtype=None)"
    assert case.assumed_args == {"dim": [0], "keepdim": False}


def test_zero_dim_tensor_is_not_a_scalar(report):
    """nll_loss_backward's grad_output is recorded as shape [] with dtype float: a 0-dim tensor."""
    row = row_of(report, "aten::nll_loss_backward", [[], [256, 10], [256], [], [], [], []])
    case = C.case_from_row(row)
    assert [t.shape for t in case.tensors] == [[], [256, 10], [256], []]
    assert [t.dtype for t in case.tensors] == ["float32", "float32", "int64", "float32"]
    assert case.stmt() == "torch.ops.aten.nll_loss_backward.default(x0, x1, x2, None, 1, -100, x3)"
    C.validate(case)                                        # class indices stay valid


def test_dtype_argument_guessed_from_the_input(report):
    case = C.case_from_row(row_of(report, "aten::_log_softmax_backward_data", [[256, 10], [256, 10], [], []]))
    assert case.assumed_args == {"dim": -1, "input_dtype": "torch.float32"}
    assert case.stmt().endswith("(x0, x1, -1, torch.float32)")


def test_concrete_inputs_are_used_when_present(report):
    row = dict(row_of(report, "aten::sum", [[256, 1024], [], [], []]), concrete_inputs=[None, [0], True, None])
    case = C.case_from_row(row)
    assert case.stmt() == "torch.ops.aten.sum.dim_IntList(x0, [0], True, dtype=None)"
    assert case.assumed_args == {}
    out, _ = run_case(case)
    assert out.shape == (1, 1024)


def test_a_non_finite_scalar_from_the_report_is_rebuilt():
    # transformers masks logits with torch.where(mask, -inf, scores); diagnose's report writes -inf as "-inf"
    from diagnose.layers.operators.kineto import _jsonable

    row = {"name": "aten::clamp_min", "input_shapes": [[4, 8], []], "dtypes": ["float", "Scalar"],
           "concrete_inputs": _jsonable([[], float("-inf")])}
    assert row["concrete_inputs"] == [[], "-inf"]
    case = C.case_from_row(row)
    assert "float('-inf')" in case.stmt()
    out, _ = run_case(case)
    assert out.shape == (4, 8)


@pytest.mark.parametrize("row, reason", [
    ({"name": "AddmmBackward0", "input_shapes": [[256, 1024]], "dtypes": ["float"]}, "not an ATen operator"),
    ({"name": "autograd::engine::evaluate_function: AddmmBackward0", "input_shapes": [], "dtypes": []},
     "not an ATen operator"),
    ({"name": "torch::autograd::AccumulateGrad", "input_shapes": [[10]], "dtypes": ["float"]},
     "not an ATen operator"),
    ({"name": "aten::mm", "input_shapes": [], "dtypes": []}, "no recorded input shapes"),
    ({"name": "aten::view", "input_shapes": [[1, 1024], []], "dtypes": ["float", "ScalarList"]},
     "argument 'size'"),
    ({"name": "aten::cat", "input_shapes": [[], []], "dtypes": ["TensorList", "Scalar"]}, "TensorList"),
    ({"name": "aten::empty_strided", "input_shapes": [[], [], [], [], [], []],
      "dtypes": ["ScalarList", "ScalarList", "Scalar", "Scalar", "", "Scalar"]}, "no tensor inputs"),
    ({"name": "aten::no_such_op", "input_shapes": [[3]], "dtypes": ["float"]}, "unknown operator aten::no_such_op"),
    ({"name": "aten::to", "input_shapes": [[256, 10], [], [], [], [], [], [], []],
      "dtypes": ["float", "Scalar", "Scalar", "", "", "Scalar", "Scalar", ""]}, "'dtype' (a dtype) was passed"),
    ({"name": "aten::mm", "input_shapes": [[2, 3], [3, 4]], "dtypes": ["float", "mystery"]}, "unknown dtype"),
])
def test_rows_that_cannot_be_rebuilt_say_why(row, reason):
    with pytest.raises(C.CannotRebuild, match=None) as e:
        C.case_from_row(row)
    assert reason in str(e.value)


def test_rejected_inputs_are_skipped_with_the_error():
    case = C.build_case("aten::mm", [[2, 3], [4, 5]], ["float", "float"])
    with pytest.raises(C.CannotRebuild, match="aten::mm rejected the rebuilt inputs: RuntimeError"):
        C.validate(case)


def test_top_k_by_self_pct_and_the_rows_passed_over(report):
    # make an unbuildable row the most expensive one: it is passed over, with its reason
    rep = dict(report, operators=[{"name": "aten::cat", "input_shapes": [[], []],
                                   "dtypes": ["TensorList", "Scalar"], "self_pct": 50.0}] + report["operators"])
    cases, skipped = C.cases_from_report(rep, top=3)
    assert [(c.op, c.input_shapes) for c in cases] == [
        ("aten::mm", [[256, 1024], [1024, 1024]]),
        ("aten::mm", [[1024, 256], [256, 1024]]),
        ("aten::addmm", [[1024], [256, 1024], [1024, 1024], [], []]),
    ]
    assert [s["op"] for s in skipped] == ["aten::cat"]
    assert "TensorList" in skipped[0]["reason"] and skipped[0]["threads"] is None
    assert all(c.flops and c.bytes for c in cases)


def test_duplicate_rows_become_one_case(report):
    row = row_of(report, "aten::mm", [[256, 1024], [1024, 1024]])
    rep = {"operators": [row, dict(row, source="other.py:1", self_pct=1.0)]}
    cases, skipped = C.cases_from_report(rep, top=5)
    assert len(cases) == 1 and not skipped


def test_report_without_operators_is_bad_input():
    with pytest.raises(UsageError, match="operators"):
        C.cases_from_report({"machine": {}}, top=3)


# --------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------

def test_recorded_strides_are_rebuilt_exactly():
    case = C.build_case("aten::mm", [[256, 64], [64, 32]], ["float", "float"], strides=[[1, 256], [32, 1]])
    assert not case.contiguous
    assert case.strides == [[1, 256], None]
    assert ".as_strided([256, 64], [1, 256])" in case.setup_code()
    _, ns = run_case(case)
    assert ns["x0"].stride() == (1, 256) and not ns["x0"].is_contiguous()
    assert ns["x1"].is_contiguous()


def test_contiguous_false_without_strides_assumes_a_transpose():
    case = C.build_case("aten::mm", [[8, 4], [4, 2]], ["float", "float"], contiguous=[False, True])
    assert "assumed last-two-dims transposed" in case.layout
    _, ns = run_case(case)
    assert ns["x0"].shape == (8, 4) and ns["x0"].stride() == (1, 8)


# --------------------------------------------------------------------------
# FLOPs and bytes (FlopCounterMode, once per case)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("op, shapes, flops", [
    ("aten::mm", [[64, 32], [32, 16]], 2 * 64 * 32 * 16),
    ("aten::bmm", [[4, 64, 32], [4, 32, 16]], 2 * 4 * 64 * 32 * 16),
    ("aten::addmm", [[16], [64, 32], [32, 16], [], []], 2 * 64 * 32 * 16),   # torch counts the product only
])
def test_flops_of_matmuls(op, shapes, flops):
    dtypes = ["float" if s else "Scalar" for s in shapes]
    case = C.validate(C.build_case(op, shapes, dtypes))
    assert case.flops == flops


def test_bytes_are_inputs_plus_outputs():
    case = C.validate(C.build_case("aten::mm", [[64, 32], [32, 16]], ["float", "float"]))
    assert case.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4


def test_unknown_work_is_none_not_zero():
    case = C.validate(C.build_case("aten::relu", [[128]], ["float"]))
    assert case.flops is None
    assert case.bytes == 2 * 128 * 4


def test_sort_returns_two_outputs_counted_in_bytes():
    case = C.validate(C.build_case("aten::sort", [[1000]], ["float"]))
    assert case.bytes == 1000 * 4 + 1000 * 4 + 1000 * 8          # input, values, int64 indices


# --------------------------------------------------------------------------
# Command-line specs
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name, parts", [
    ("aten::bmm", ("aten", "bmm", None)),
    ("aten::add.Tensor", ("aten", "add", "Tensor")),
    ("torch.ops.aten.mm.default", ("aten", "mm", "default")),
    ("aten.mm", ("aten", "mm", None)),
    ("mm", ("aten", "mm", None)),
])
def test_operator_names(name, parts):
    assert C.split_op_name(name) == parts


def test_a_row_only_an_out_overload_takes_is_rebuilt_with_it_and_its_out_tensor_is_not_read():
    # a compiled graph's GEMM: the profiler records addmm's out tensor as its last input
    shapes = [[16], [64, 32], [32, 16], [], [], [64, 16]]
    case = C.validate(C.build_case("aten::addmm", shapes, ["float"] * 3 + ["Scalar", "Scalar", "float"]))
    assert case.overload == "out" and case.read == [True, True, True, False]
    assert case.stmt() == "torch.ops.aten.addmm.out(x0, x1, x2, beta=1, alpha=1, out=x3)"
    assert case.flops == 2 * 64 * 32 * 16
    assert case.bytes == (16 + 64 * 32 + 32 * 16) * 4 + 64 * 16 * 4   # inputs read, the out tensor written once
    # a row a plain overload takes never gets the out= one
    assert C.build_case("aten::addmm", shapes[:5], ["float"] * 3 + ["Scalar", "Scalar"]).overload == "default"
    assert C.build_case("aten::mm", [[2, 3], [3, 4]], ["float", "float"]).overload == "default"


def test_explicit_overload_is_honoured():
    case = C.build_case("aten::add.Tensor", [[4], [4], []], ["float", "float", "Scalar"])
    assert case.stmt() == "torch.ops.aten.add.Tensor(x0, x1, alpha=1)"


def test_parse_shapes_and_dtypes():
    shapes = C.parse_shapes("[32,1024,64],[32,64,1024]")
    assert shapes == [[32, 1024, 64], [32, 64, 1024]]
    assert C.spec_dtypes(shapes, "bf16", None) == ["c10::BFloat16", "c10::BFloat16"]
    assert C.spec_dtypes([[4], []], None, None) == ["float", "Scalar"]
    assert C.spec_dtypes([[4], [4]], None, "float32,int64") == ["float", "long int"]
    for bad in ("[32,1024", "32,64", "[1.5]", "[-1]", ""):
        with pytest.raises(UsageError, match="malformed --shapes"):
            C.parse_shapes(bad)
    with pytest.raises(UsageError, match="unknown dtype"):
        C.spec_dtypes([[4]], "float33", None)


def test_arg_overrides():
    assert C.parse_arg_overrides(["dim=0", "keepdim=true", "dims=[0,1]"]) == {
        "dim": 0, "keepdim": True, "dims": [0, 1]}
    case = C.build_case("aten::sort", [[100, 10]], ["float"], overrides={"dim": 0})
    assert case.stmt() == "torch.ops.aten.sort.default(x0, 0, False)"
    assert case.assumed_args == {}
    # an argument the shapes do not mention selects the overload that has it
    case = C.build_case("aten::sum", [[256, 1024]], ["float"], overrides={"dim": [0], "keepdim": True})
    assert case.stmt() == "torch.ops.aten.sum.dim_IntList(x0, [0], True, dtype=None)"
    assert C.build_case("aten::sum", [[8]], ["float"]).stmt() == "torch.ops.aten.sum.default(x0, dtype=None)"
    with pytest.raises(C.CannotRebuild, match="no argument named nope"):
        C.build_case("aten::sort", [[10]], ["float"], overrides={"nope": 1})


def test_dtype_vocabulary():
    assert C.torch_dtype_name("long int") == "int64"
    assert C.torch_dtype_name("c10::BFloat16") == "bfloat16"
    assert C.torch_dtype_name("torch.float16") == "float16"
    assert C.torch_dtype_name("Scalar") is None
    assert C.profiler_dtype_name("float32") == "float"


def test_setup_code_is_plain_torch():
    case = C.build_case("aten::where", [[16], [16], [16]], ["bool", "float", "float"])
    code = case.setup_code()
    assert "microbench" not in code
    ns = {"torch": torch}
    exec(code, ns)
    assert ns["x0"].dtype == torch.bool and ns["x1"].shape == (16,)
