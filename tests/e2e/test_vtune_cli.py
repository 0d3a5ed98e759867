"""`diagnose --vtune`: skipped with the reason where VTune is missing; with a stand-in `vtune` on PATH,
the pass runs under it and its CSV reports fill report.counters.

The stand-in is a shell script that does what the real command line does to
our process: `vtune -collect ... -result-dir DIR -- CMD` runs CMD and leaves
DIR; `vtune -report ...` writes the report to -report-output, here one of
the VTune CSV outputs committed under tests/data/counters/.
"""

from __future__ import annotations

import os
import stat
import sys

from conftest import REPO, run_cli

DATA = REPO / "tests" / "data" / "counters"
FAKE = """#!/bin/sh
if [ "$1" = "-collect" ]; then
  while [ "$1" != "--" ]; do
    if [ "$1" = "-result-dir" ]; then mkdir -p "$2"; fi
    shift
  done
  shift
  exec "$@"
fi
kind=summary; out=""
while [ $# -gt 0 ]; do
  case "$1" in
    -group-by) kind=tasks ;;
    hotspots) [ "$kind" = summary ] && kind=functions ;;
    -report-output) out="$2" ;;
  esac
  shift
done
case "$kind" in
  summary) cp "{data}/vtune_summary_hotspots.csv" "$out" ;;
  tasks) cp "{data}/vtune_hotspots_tasks.csv" "$out" ;;
  functions) cp "{data}/vtune_hotspots_functions.csv" "$out" ;;
esac
"""


def test_without_vtune_the_layer_is_skipped_and_the_report_complete(tmp_path):
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    run = run_cli("examples/mlp.py:step", "--iters", "2", "--warmup", "0", "--layers", "operators", "--vtune",
                  outdir=tmp_path / "r", env=env)
    assert run.code == 0, run.stderr
    r = run.report
    assert r["layers"]["vtune"]["status"] == "skipped" and "vtune is not on PATH" in r["layers"]["vtune"]["reason"]
    assert r["layers"]["operators"]["status"] == "ok" and r["operators"]


def test_with_vtune_on_path_the_pass_runs_under_it_and_fills_counters(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vtune"
    fake.write_text(FAKE.replace("{data}", str(DATA)))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run = run_cli("examples/mlp.py:step", "--iters", "2", "--warmup", "0", "--layers", "operators", "--vtune",
                  outdir=tmp_path / "r", env=env)
    assert run.code == 0, run.stderr
    r = run.report
    assert r["layers"]["vtune"]["status"] == "ok", r["layers"]["vtune"]
    vt = r["counters"]["vtune"]
    # the numbers of the committed hotspots summary (tests/data/counters/vtune_summary_hotspots.csv)
    assert vt["cpu_time_s"] == 7.948 and r["counters"]["spin_overhead_pct"] == 24.37
    spin = [f for f in r["findings"] if "spin" in f["title"].lower()]
    assert spin and spin[0]["kind"] == "low_efficiency", r["findings"]
