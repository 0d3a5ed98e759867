"""sequential_operator on micro-benchmark rows: thresholds, severity from the share, doubts."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.findings.microbench import scaled_speedup, sequential_operator, speedup_noise
from diagnose.report.model import Efficiency, MemoryPeak, MicrobenchRow, OperatorRow, Peaks, Report, Roofs, TargetInfo


def _report(one_us: float, two_us: float, share: float = 60.0, **flags) -> Report:
    rep = Report(target=TargetInfo(script="sort.py"))
    rep.operators = [OperatorRow(name="aten::sort", input_shapes=[[4000000], [], []], dtypes=["float"], calls=6,
                                 self_cpu_us=1e6, total_cpu_us=1e6, self_pct=share, source="sort.py:15")]
    base = {"op": "aten::sort", "input_shapes": [[4000000], [], []], "dtypes": ["float"], "source": "sort.py:15",
            "reproducer": "reproducers/01_sort_4000000.py", "iqr_us": 0.0}
    rep.microbenchmarks = [
        MicrobenchRow(**base, threads=1, median_us=one_us, noise_pct=1.0, noisy=False, contended=False),
        MicrobenchRow(**base, threads=2, median_us=two_us, **{"noise_pct": 1.0, "noisy": False, "contended": False,
                                                              **flags}),
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


@pytest.mark.parametrize("two_us, share, expected, borderline", [
    (444_400 / 1.9, 60.0, None, None),   # parallelises: no finding
    (444_400 / 1.4, 60.0, None, None),   # 1.27-1.54x within the 10% run-to-run floor: clear of the 1.25x line
    (444_400 / 1.3, 60.0, "low", "high"),  # 1.18-1.43x: straddles the line, reported low, borderline high
    (444_400 / 1.24, 60.0, "low", "high"),  # just under the line, as near it
    (444_400 / 1.12, 60.0, "high", None),  # 1.02-1.23x: the whole interval under the line
    (444_400, 20.0, "medium", None),
    (444_400, 10.5, "low", "medium"),  # its share's interval (9.5-11.6%) straddles the 10% line: the milder side
    (444_400, 6.0, "low", None),
    (444_400, 2.0, None, None),  # too small a share to matter
])
def test_thresholds(two_us, share, expected, borderline):
    found = sequential_operator(_report(444_400, two_us, share))
    assert [f.severity for f in found] == ([expected] if expected else [])
    assert [f.borderline.would_be if f.borderline else None for f in found] == ([borderline] if expected else [])
    for f in found:
        assert f.evidence["speedup_noise"] == 0.1  # the floor: these rows' own IQR is small
        if f.borderline and f.borderline.unit == "x":
            assert f.borderline.low < 1.25 <= f.borderline.high
        elif f.borderline:  # the share's line, when the speedup's interval is clear of its own
            assert f.borderline.low < 10.0 <= f.borderline.high and f.borderline.measure == "share of operator CPU time"


def test_paired_turns_give_the_speedup_its_noise_where_the_rows_iqrs_do_not():
    # gallery 2026-11-29, a 4M sort: each count's turns 500-740 ms by the vCPU stretch they fell in (IQR 22% a
    # count), each pair of turns within a few percent of each other
    ones = [683, 667, 736, 704, 671, 626, 659, 585, 628, 655, 612, 523, 657, 650]
    twos = [663, 654, 724, 705, 621, 618, 578, 646, 650, 653, 623, 552, 552, 590]
    flags = {"noise_pct": 22.0, "noisy": True, "contended": False}
    rep = _report(sum(ones) / len(ones) * 1e3, sum(twos) / len(twos) * 1e3, reference_speedup=1.6, **flags)
    rep.microbenchmarks[0] = dataclasses.replace(rep.microbenchmarks[0], turns_us=[t * 1e3 for t in ones], **flags)
    rep.microbenchmarks[1] = dataclasses.replace(rep.microbenchmarks[1], turns_us=[t * 1e3 for t in twos])
    rel, paired, pairs = speedup_noise(rep.microbenchmarks[0], rep.microbenchmarks[1])
    assert paired is not None and paired < 0.1 and rel == 0.1 and pairs == 14  # the floor: the pairs agree
    (f,) = sequential_operator(rep)
    assert f.severity == "high" and not f.doubts  # 1.03x, 0.94-1.13x: under the line, the rows' IQRs no doubt
    assert f.evidence["paired_turns"] == 14 and f.evidence["reference_speedup"] == 1.6
    assert f.evidence["threshold_speedup"] == 1.25 and "reference beside it 1.60x" in f.title
    # unpaired (a report from before the turns), the same rows' IQRs make the interval reach the line: doubted
    for row in rep.microbenchmarks:
        row.turns_us = []
    (g,) = sequential_operator(rep)
    assert g.severity == "low" and any("noisy" in d for d in g.doubts)
    # pairs that disagree are a doubt of their own
    rep.microbenchmarks[0].turns_us = [t * 1e3 for t in ones]
    rep.microbenchmarks[1].turns_us = [t * 1e3 * (1.6 if i % 2 else 0.7) for i, t in enumerate(twos)]
    assert speedup_noise(*rep.microbenchmarks)[1] > 0.1
    (h,) = sequential_operator(rep)
    assert h.severity == "low" and any("disagree" in d for d in h.doubts)


def test_a_contended_or_noisy_measurement_is_only_low_and_says_why():
    (f,) = sequential_operator(_report(444_400, 440_000, contended=True))
    assert f.severity == "low" and "contended" in f.doubts[0]
    (g,) = sequential_operator(_report(444_400, 440_000, noisy=True, noise_pct=25.0))
    assert g.severity == "low" and "noisy" in g.doubts[0]
    # a doubted flat result is not called a sequential kernel: re-measure first
    for h in (f, g):
        assert "a doubted result" in h.title and h.suggestion.startswith("Re-measure before acting")
        assert "the kernel is sequential" not in h.suggestion
    # noisy, but flat at either end of its interval (1.01x, 14% IQR: at most 1.15x): not doubted
    (k,) = sequential_operator(_report(444_400, 440_000, noisy=True, noise_pct=14.0))
    assert k.severity == "high" and not k.doubts and k.evidence["speedup_noise"] == pytest.approx(0.14, abs=0.001)


def test_a_flat_operator_beside_a_flat_reference_is_doubted():
    # examples/growing_cache.py (2-CPU AMD EPYC, 2026-12-03, one run of five): tanh 1.08x on 2 threads beside a
    # perfectly parallel reference of 1.01x, timed in the same turns, made a medium finding; the reference under the
    # 1.25x line says the CPUs could not show a speedup for anything then
    (f,) = sequential_operator(_report(444_400, 411_000, reference_speedup=1.01))
    assert f.severity == "low" and "reference beside it ran 1.01x on 2 threads" in f.doubts[0], f.doubts
    assert "a doubted result" in f.title and f.suggestion.startswith("Re-measure before acting")
    # a reference that cleared the line vouches for the measurement: the flat operator is sequential
    (g,) = sequential_operator(_report(444_400, 411_000, reference_speedup=1.9))
    assert g.severity == "high" and not g.doubts and "the kernel is sequential" in g.suggestion
    # one that cleared it narrowly leaves little to tell apart: 1.08x of a 1.3x reference is a 1.27x scaled
    # speedup, 1.16-1.40x with the floor, borderline
    (h,) = sequential_operator(_report(444_400, 411_000, reference_speedup=1.3))
    assert h.severity == "low" and not h.doubts and h.evidence["speedup_scaled"] == pytest.approx(1.27, abs=0.005)
    assert h.borderline.would_be == "high" and h.borderline.low < 1.25 <= h.borderline.high


def test_the_speedup_is_judged_scaled_by_the_parallel_reference_beside_it():
    # examples/dataloader_contention.py's addmm [8,8192] x [8192,512] (2-CPU AMD EPYC, 2026-12-03, five runs): its
    # speedup followed the reference timed in the same turns. Raw, two runs' intervals cleared the line (medium) and
    # three straddled it (low); scaled, 1.20-1.29x, all five straddle it
    runs = [(1.28, 1.97), (1.27, 1.96), (1.11, 1.49), (1.16, 1.56), (1.13, 1.66)]
    raw, scaled = [], []
    for speedup, reference in runs:
        (f,) = sequential_operator(_report(444_400, 444_400 / speedup, share=20.0))
        raw.append(f.severity)
        (g,) = sequential_operator(_report(444_400, 444_400 / speedup, share=20.0, reference_speedup=reference))
        scaled.append(g.severity)
        assert g.evidence["speedup_scaled"] == pytest.approx(1 + (speedup - 1) / (reference - 1), abs=0.001)
        assert g.borderline.low < 1.25 <= g.borderline.high and g.borderline.would_be == "medium"
        assert "scaled by the parallel reference" in g.borderline.measure and "on CPUs that gave it all 2" in g.title
    assert raw == ["low", "low", "medium", "low", "medium"] and scaled == ["low"] * 5
    # a 4M sort at 1.05x beside a 1.59x reference: 1.08x scaled, under the line at either end of its interval
    (s,) = sequential_operator(_report(444_400, 444_400 / 1.05, reference_speedup=1.59))
    assert s.severity == "high" and s.borderline is None
    assert s.evidence["speedup_scaled"] == pytest.approx(1.085, abs=0.001)
    # its measured noise is carried through the scaling: a 1.9x reference barely moves it, a 1.3x one triples it
    assert scaled_speedup(1.05, 0.05, 2, 1.9)[1] == pytest.approx(0.1)  # the floor
    value, rel = scaled_speedup(1.05, 0.05, 2, 1.3)
    # 1.05 / 1.05 scales to 1.0 and 1.05 x 1.05 to 1.34: the wider side, 1.167 / 1.0, is its noise
    assert value == pytest.approx(7 / 6) and rel == pytest.approx(1 / 6)
    # a slowdown is no gain to scale (numpy_beside_torch's mm ran 0.53x beside a 1.45x reference: scaled as a gain,
    # -0.05x); its interval's low end likewise
    assert scaled_speedup(0.53, 0.05, 2, 1.45) == (0.53, 0.1)
    value, rel = scaled_speedup(1.02, 0.2, 2, 1.5)  # the low end, 0.85x, is not scaled to 0.70x
    assert value == pytest.approx(1.04) and rel == pytest.approx(max(1.04 / 0.85, (1 + 0.224 / 0.5) / 1.04) - 1)
    # no reference, or one under the line (doubted): the speedup itself, on the floor
    assert scaled_speedup(1.05, 0.02, 2, None) == (1.05, 0.1) and scaled_speedup(1.05, 0.02, 2, 1.1) == (1.05, 0.1)


def test_the_speedup_is_taken_at_the_usable_cpus_not_at_a_count_above_them():
    # examples/too_many_threads.py asks for 8 threads on 2 usable CPUs: its 8-thread row measures the threads
    # waiting for each other (a 512^3 GEMM 1.89 ms on 1 thread, 1.40 ms on 8, 1.45 ms on 2: 1.35x, "7 of the 8 CPUs
    # idle"); the speedup is the one the CPUs can give, from 1 to 2 threads
    rep = _report(444_400, 222_200)  # 2x on the 2 usable CPUs: it parallelises
    rep.machine.usable_cpus = 2
    eight = dataclasses.replace(rep.microbenchmarks[1], threads=8, median_us=440_000)
    rep.microbenchmarks.append(eight)
    assert sequential_operator(rep) == []
    rep.machine.usable_cpus = 0  # not known: the most threads measured
    (f,) = sequential_operator(rep)
    assert f.evidence["threads"] == 8
    rep.machine.usable_cpus = 1  # one CPU: no thread count leaves a CPU idle
    assert sequential_operator(rep) == []


def test_needs_one_thread_and_at_least_two():
    rep = _report(444_400, 440_000)
    rep.microbenchmarks = [r for r in rep.microbenchmarks if r.threads == 1]
    assert sequential_operator(rep) == []


def test_a_tiny_op_is_too_small_to_split_not_sequential():
    assert sequential_operator(_report(10.0, 10.2)) == []  # 10 µs: below torch's grain size
    assert len(sequential_operator(_report(250.0, 245.0))) == 1


def _gemm(a: list[int], b: list[int], one_us: float, most_us: float, share: float = 60.0,
          gb_per_s_1_thread: float | None = None, roof_gb_per_s: float | None = None) -> Report:
    rep = Report(target=TargetInfo(script="model.py"))
    rep.operators = [OperatorRow(name="aten::mm", input_shapes=[a, b], dtypes=["float", "float"], calls=48,
                                 self_cpu_us=1e4, total_cpu_us=1e4, self_pct=share, source="model.py:10")]
    n_bytes = 4 * (a[0] * a[1] + b[0] * b[1] + a[0] * b[1])
    base = {"op": "aten::mm", "input_shapes": [a, b], "dtypes": ["float", "float"], "source": "model.py:10",
            "reproducer": "reproducers/01_mm.py", "bytes": n_bytes, "noise_pct": 1.0, "noisy": False,
            "contended": False, "iqr_us": 0.0}
    rep.microbenchmarks = [
        MicrobenchRow(**base, threads=1, median_us=one_us,
                      gbytes_per_s=gb_per_s_1_thread if gb_per_s_1_thread is not None
                      else round(n_bytes / one_us / 1e3, 2)),
        MicrobenchRow(**base, threads=2, median_us=most_us, gbytes_per_s=round(n_bytes / most_us / 1e3, 2)),
    ]
    if roof_gb_per_s is not None:
        rep.efficiency = Efficiency(
            peaks=Peaks(memory=[MemoryPeak(threads=1, gb_per_s=17.3), MemoryPeak(threads=2, gb_per_s=roof_gb_per_s)]),
            roofs=Roofs(threads=2, gflops_per_s=None, gb_per_s=roof_gb_per_s, ridge_flop_per_byte=None))
    return rep


def test_a_gemv_that_saturates_memory_on_one_thread_is_bandwidth_bound_not_sequential():
    # GPT-2's lm_head, measured by the team: mm [2,256] x [256,8000], 226 µs on 1 thread (8.26 MB of
    # inputs and output: 36.5 GB/s), 233 µs on 2 (0.97x); the efficiency probe streams 38.6 GB/s here
    (f,) = sequential_operator(_gemm([2, 256], [256, 8000], 226.0, 233.0, share=13.1, roof_gb_per_s=38.6))
    e = f.evidence
    assert (f.kind, e["cause"]) == ("sequential_operator", "memory_bandwidth")
    assert e["gb_per_s_1_thread"] == 36.54 and e["roof_gb_per_s"] == 38.6 and e["bandwidth_fraction"] == 0.947
    assert e["threshold_bandwidth_fraction"] == 0.6 and e["speedup"] == 0.97 and e["gemm_mnk"] == [2, 8000, 256]
    assert "limited by memory bandwidth, not threads" in f.title and "sequential" not in f.title
    assert "sequential" not in f.suggestion and "batch" in f.suggestion
    assert "bfloat16" in f.suggestion and "int8" in f.suggestion
    assert f.severity == "medium" and not f.doubts  # a real cause, from its 13% share


def test_bandwidth_is_judged_against_this_machines_roof():
    # the same GEMV where one thread moves 36.5 GB/s of a 200 GB/s server's bandwidth (18%): threads could
    # read faster, but BLAS runs a product this skinny (M=2) on one thread: the shape's story, not a doubt
    (f,) = sequential_operator(_gemm([2, 256], [256, 8000], 226.0, 233.0, share=13.1, roof_gb_per_s=200.0))
    assert f.evidence["cause"] == "skinny_matmul" and f.evidence["bandwidth_fraction"] == 0.183
    assert "skinny matrix product (M=2, N=8000, K=256) that runs on one thread" in f.title
    assert "batch several sequences" in f.suggestion and "bfloat16" in f.suggestion
    assert f.severity == "medium" and not f.doubts
    # just under and at the 60% threshold
    assert sequential_operator(_gemm([2, 256], [256, 8000], 226.0, 233.0, roof_gb_per_s=61.0))[0] \
        .evidence["cause"] == "skinny_matmul"
    assert sequential_operator(_gemm([2, 256], [256, 8000], 226.0, 233.0, roof_gb_per_s=60.9))[0] \
        .evidence["cause"] == "memory_bandwidth"
    # without the efficiency layer's peaks there is no bandwidth to compare with: the shape still says skinny
    assert sequential_operator(_gemm([2, 256], [256, 8000], 226.0, 233.0))[0].evidence["cause"] == "skinny_matmul"


def test_a_skinny_gemm_with_contiguous_inputs_gets_no_layout_advice_and_a_transposed_one_does():
    # microbench's rows say `contiguous` as one bool for the case (microbench/results.py Row)
    for contiguous, advice in ((True, False), (False, True)):
        rep = _gemm([2, 256], [256, 8000], 226.0, 233.0, roof_gb_per_s=200.0)
        for row in rep.microbenchmarks:
            row.contiguous = contiguous
        (f,) = sequential_operator(rep)
        assert f.evidence["cause"] == "skinny_matmul"
        assert ("transposed view" in f.suggestion) is advice, f.suggestion


def test_a_flat_large_gemm_is_doubted_a_flat_skinny_one_is_not():
    # examples/mlp.py's mm [1024,256] x [256,512] once measured 1.1x from 1 to 2 threads in CI: M, N, K are
    # all >= 256, so it splits across threads and the flat result is a disturbed measurement
    (f,) = sequential_operator(_gemm([1024, 256], [256, 512], 6000.0, 5450.0, roof_gb_per_s=38.6))
    assert f.severity == "low" and f.evidence["cause"] == "sequential_kernel"
    assert "an output of at least 256 x 256 and K >= 256 (M=1024, N=512, K=256)" in f.doubts[0]
    assert f.evidence["threshold_gemm_dim"] == 256
    # examples/autocast_weights.py's bf16 addmm, M=64: 8 output blocks of 64 x 128, 1.57-1.90x in 5 of 8 runs on
    # the Xeon VM, 0.99-1.03x in 3 beside a parallel reference at 1.47-1.63x
    (w,) = sequential_operator(_gemm([64, 4096], [4096, 1024], 1271.0, 1287.0, roof_gb_per_s=38.6))
    assert w.severity == "low" and "(M=64, N=1024, K=4096)" in w.doubts[0]
    # a 32-row batch into 1024 columns (a 32 x 1024 output, 2 of 128 x 128 blocks): judged like any operator
    (g,) = sequential_operator(_gemm([32, 1024], [1024, 1024], 6000.0, 5450.0, roof_gb_per_s=38.6))
    assert g.severity == "high" and not g.doubts
    # a sort is not a GEMM: its shape says nothing about threads
    (h,) = sequential_operator(_report(444_400, 440_000))
    assert h.severity == "high" and "gemm_mnk" not in h.evidence


def test_a_bandwidth_bound_copy_is_told_its_causes_change_not_a_smaller_dtype():
    # examples/autocast_weights.py: autocast's cast of a [4096,1024] weight to bfloat16 moved 26.4 GB/s on one
    # thread of a 33.4 GB/s roof; "use a smaller dtype (bfloat16)" was its advice, the very cast it makes. Any
    # copy gets its cause's change: here a .contiguous() copy's
    rep = _gemm([2, 256], [256, 8000], 226.0, 233.0, share=13.1, roof_gb_per_s=38.6)
    shapes = [[4096, 1024], [4096, 1024]]
    rep.operators = [OperatorRow(name="aten::copy_", input_shapes=shapes, dtypes=["c10::BFloat16", "float"], calls=6,
                                 self_cpu_us=1e6, total_cpu_us=1e6, self_pct=13.1, source="model.py:10",
                                 called_by={"aten::contiguous": 1e6})]
    for row in rep.microbenchmarks:
        row.op, row.input_shapes, row.dtypes = "aten::copy_", shapes, ["c10::BFloat16", "float"]
    (f,) = sequential_operator(rep)
    assert f.evidence["cause"] == "memory_bandwidth"
    assert "smaller dtype" not in f.suggestion and ".contiguous()" in f.suggestion, f.suggestion
