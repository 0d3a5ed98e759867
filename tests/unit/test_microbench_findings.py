"""sequential_operator on micro-benchmark rows: thresholds, severity from the share, doubts."""

from __future__ import annotations

import pytest

from diagnose.findings.microbench import sequential_operator
from diagnose.report.model import OperatorRow, Report, TargetInfo


def _report(one_us: float, two_us: float, share: float = 60.0, **flags) -> Report:
    rep = Report(target=TargetInfo(script="sort.py"))
    rep.operators = [OperatorRow(name="aten::sort", input_shapes=[[4000000], [], []], dtypes=["float"], calls=6,
                                 self_cpu_us=1e6, total_cpu_us=1e6, self_pct=share, source="sort.py:15")]
    base = {"op": "aten::sort", "input_shapes": [[4000000], [], []], "dtypes": ["float"], "source": "sort.py:15",
            "reproducer": "reproducers/01_sort_4000000.py"}
    rep.microbenchmarks = [
        {**base, "threads": 1, "median_us": one_us, "noise_pct": 1.0, "noisy": False, "contended": False},
        {**base, "threads": 2, "median_us": two_us, "noise_pct": 1.0, **{"noisy": False, "contended": False, **flags}},
    ]
    return rep


def test_a_kernel_that_does_not_speed_up_is_sequential_with_its_line_and_times():
    (f,) = sequential_operator(_report(444_400, 438_380))
    assert (f.kind, f.severity, f.op, f.location) == ("sequential_operator", "high", "aten::sort", "sort.py:15")
    e = f.evidence
    assert (e["median_us_1_thread"], e["median_us_2_threads"], e["speedup"], e["share_pct"]) == (
        444400.0, 438380.0, 1.014, 60.0)
    assert "torch.topk" in f.suggestion and "reproducers/01_sort_4000000.py" in f.suggestion
    assert "[4000000] does not speed up" in f.title


@pytest.mark.parametrize("two_us, share, expected", [
    (444_400 / 1.9, 60.0, None),   # parallelises: no finding
    (444_400 / 1.24, 60.0, "high"),  # just under the 1.25x threshold
    (444_400, 20.0, "medium"),
    (444_400, 6.0, "low"),
    (444_400, 2.0, None),  # too small a share to matter
])
def test_thresholds(two_us, share, expected):
    found = sequential_operator(_report(444_400, two_us, share))
    assert [f.severity for f in found] == ([expected] if expected else [])


def test_a_contended_or_noisy_measurement_is_only_low_and_says_why():
    (f,) = sequential_operator(_report(444_400, 440_000, contended=True))
    assert f.severity == "low" and "contended" in f.evidence["doubts"][0]
    (g,) = sequential_operator(_report(444_400, 440_000, noisy=True, noise_pct=25.0))
    assert g.severity == "low" and "noisy" in g.evidence["doubts"][0]


def test_needs_one_thread_and_at_least_two():
    rep = _report(444_400, 440_000)
    rep.microbenchmarks = [r for r in rep.microbenchmarks if r["threads"] == 1]
    assert sequential_operator(rep) == []


def test_a_tiny_op_is_too_small_to_split_not_sequential():
    assert sequential_operator(_report(10.0, 10.2)) == []  # 10 µs: below torch's grain size
    assert len(sequential_operator(_report(250.0, 245.0))) == 1


def _as_addmm(rep: Report, probe_2_threads: float | None) -> Report:
    for row in rep.microbenchmarks:
        row["op"] = "aten::addmm"
    rep.operators[0].name = "aten::addmm"
    if probe_2_threads is not None:
        rep.efficiency = {"peaks": {"gemm_fp32": [{"threads": 1, "gflops_per_s": 87.2},
                                                  {"threads": 2, "gflops_per_s": probe_2_threads}]}}
    return rep


def test_a_flat_gemm_on_a_machine_whose_gemm_probe_scaled_is_doubted():
    # a CI run once measured addmm at 1.1x from 1 to 2 threads while the probe's GEMM scaled 1.78x
    (f,) = sequential_operator(_as_addmm(_report(6000, 5450), probe_2_threads=155.6))
    assert f.severity == "low" and "GEMM probe scaled 1.78x from 1 to 2 threads" in f.evidence["doubts"][0]
    # without a probe, or on a machine where GEMMs do not scale either, the measurement stands
    assert [g.severity for g in sequential_operator(_as_addmm(_report(6000, 5450), None))] == ["high"]
    assert [g.severity for g in sequential_operator(_as_addmm(_report(6000, 5450), 95.0))] == ["high"]
    # a sort is not a GEMM: the probe says nothing about it
    rep = _report(444_400, 440_000)
    rep.efficiency = {"peaks": {"gemm_fp32": [{"threads": 1, "gflops_per_s": 87.2}, {"threads": 2, "gflops_per_s": 155.6}]}}
    assert [g.severity for g in sequential_operator(rep)] == ["high"]
