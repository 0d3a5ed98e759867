"""report.microbenchmarks holds microbench's own rows, typed: MicrobenchRow mirrors microbench/results.py's Row."""

from __future__ import annotations

import dataclasses

from diagnose.report import io as report_io
from diagnose.report.model import MicrobenchRow
from microbench.results import Row


def test_the_report_row_has_microbenchs_fields_in_its_order():
    assert [f.name for f in dataclasses.fields(MicrobenchRow)] == [f.name for f in dataclasses.fields(Row)]


def test_a_results_row_becomes_a_report_row_and_writes_back_unchanged():
    # a row with every field set (made-up numbers): a transposed weight, assumed arguments, block times
    row = dataclasses.asdict(Row(
        op="aten::addmm", overload="default", input_shapes=[[768], [2, 768], [768, 768]],
        dtypes=["float", "float", "float"], contiguous=False, strides=[None, None, [1, 768]],
        layout="as recorded (strides)", threads=2, median_us=120.5, iqr_us=3.2, runs=9, number_per_run=40,
        noise_pct=2.656, noisy=False, flops=2359296, gflops_per_s=19.6, bytes=2371584, gbytes_per_s=19.7,
        speedup_vs_1_thread=1.02, parallel_efficiency=0.51, others_cpus=0.05, contended=False,
        source="model.py:10", self_pct=12.5, reproducer="01_addmm.py", assumed_args={"beta": 1, "dim": [0]},
        stmt="torch.ops.aten.addmm.default(x0, x1, x2)", times_us=[120.1, 120.5, 123.0]))
    typed = report_io.typed(MicrobenchRow, row)
    assert typed.strides == [None, None, [1, 768]] and typed.assumed_args == {"beta": 1, "dim": [0]}
    assert report_io.to_dict(typed) == row
    assert list(report_io.to_dict(typed)) == list(row)  # report.json keeps microbench's key order
