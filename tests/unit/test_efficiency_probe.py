"""Machine peaks: the real (quick) probe in its own process, the per-machine cache, roof selection."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys

import pytest
import torch

from diagnose.layers.efficiency import probe
from diagnose.report import io as report_io
from diagnose.report.model import Peaks

PEAKS = {
    "format": probe.CACHE_FORMAT, "key": probe.machine_key("Test CPU", 4, "2.13.0"), "mode": "full",
    "measured_at": "2025-01-01T00:00:00+0000", "probe_s": 4.2, "contended": False,
    "gemm_fp32": [{"threads": 1, "n": 1024, "gflops_per_s": 80.0, "calls": 12, "median_s": 0.027, "iqr_pct": 2.0},
                  {"threads": 4, "n": 1024, "gflops_per_s": 300.0, "calls": 30, "median_s": 0.007, "iqr_pct": 3.0}],
    "memory": [{"threads": 1, "array_mib": 256, "copy_gb_per_s": 12.0, "triad_gb_per_s": 14.0, "gb_per_s": 14.0},
               {"threads": 4, "array_mib": 256, "copy_gb_per_s": 30.0, "triad_gb_per_s": 28.0, "gb_per_s": 30.0}],
}


def test_cache_directory_precedence():
    assert probe.cache_dir({"DIAGNOSE_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/b"}) == "/a"
    assert probe.cache_dir({"XDG_CACHE_HOME": "/b"}) == "/b/diagnose"
    assert probe.cache_dir({}).endswith(os.path.join(".cache", "diagnose"))


def test_cache_is_per_machine_key(tmp_path):
    path = probe.save_peaks(PEAKS, str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path)
    assert probe.cached_peaks(PEAKS["key"], str(tmp_path)) == PEAKS
    for other in (probe.machine_key("Test CPU", 2, "2.13.0"), probe.machine_key("Other CPU", 4, "2.13.0"),
                  probe.machine_key("Test CPU", 4, "2.14.0")):
        assert probe.cache_path(other, str(tmp_path)) != path
        assert probe.cached_peaks(other, str(tmp_path)) is None


def test_a_quick_probe_is_never_taken_for_the_full_one(tmp_path):
    quick = {**PEAKS, "mode": "quick", "key": probe.machine_key("Test CPU", 4, "2.13.0", "quick")}
    probe.save_peaks(quick, str(tmp_path))
    assert probe.cached_peaks(probe.machine_key("Test CPU", 4, "2.13.0", "full"), str(tmp_path)) is None
    assert probe.cached_peaks(quick["key"], str(tmp_path)) == quick


def test_a_cache_file_of_another_format_is_measured_again(tmp_path):
    path = probe.save_peaks({**PEAKS, "format": probe.CACHE_FORMAT + 1}, str(tmp_path))
    assert probe.cached_peaks(PEAKS["key"], str(tmp_path)) is None
    with open(path, "w") as fh:
        fh.write("{truncated")
    assert probe.cached_peaks(PEAKS["key"], str(tmp_path)) is None


def test_roofs_use_the_best_measurement_at_or_below_the_thread_count():
    peaks = report_io.typed(Peaks, PEAKS)  # the cache file's JSON is the report's Peaks
    assert peaks.gemm_peak(1) == 80.0 and peaks.gemm_peak(2) == 80.0
    assert peaks.gemm_peak(4) == 300.0 and peaks.gemm_peak(8) == 300.0
    assert peaks.bandwidth_peak(1) == 14.0 and peaks.bandwidth_peak(4) == 30.0
    slow_two = {**PEAKS, "gemm_fp32": [{"threads": 1, "gflops_per_s": 90.0}, {"threads": 2, "gflops_per_s": 60.0}]}
    assert report_io.typed(Peaks, slow_two).gemm_peak(2) == 90.0  # a 2-thread run can do what 1 thread does
    assert Peaks().gemm_peak(2) is None and Peaks().bandwidth_peak(2) is None


def test_describe_states_the_peaks_and_the_ridge():
    text = probe.describe(PEAKS, "/c/peaks.json", cached=True)
    assert "300.0 GFLOP/s" in text and "30.0 GB/s" in text and "ridge point at 4 threads: 10.0 FLOP/byte" in text
    assert "from the cache" in text and "/c/peaks.json" in text


def test_llc_size_from_sysfs(tmp_path):
    for name, size in (("index0", "48K"), ("index2", "1280K"), ("index3", "32768K")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(size + "\n")
    assert probe.llc_bytes(str(tmp_path)) == 32 << 20
    assert probe.llc_bytes(str(tmp_path / "missing")) is None


def test_quick_probe_measures_real_peaks_and_caches_them(tmp_path):
    env = {**os.environ, "DIAGNOSE_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "diagnose.layers.efficiency.probe", "--quick", "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=120).stdout)
    usable = out["key"]["usable_cpus"]
    assert [g["threads"] for g in out["gemm_fp32"]] == sorted({1, usable})
    assert len({g["n"] for g in out["gemm_fp32"]}) == 1  # one size for every thread count
    # any CPU of the last decade does > 2 GFLOP/s fp32 on one core and > 1 GB/s
    assert all(g["gflops_per_s"] > 2 for g in out["gemm_fp32"]), out["gemm_fp32"]
    assert all(m["gb_per_s"] > 1 and m["array_mib"] == 64 for m in out["memory"]), out["memory"]
    assert out["mode"] == "quick" and out["cached"] is False
    costs = out["call_costs"]
    assert [p["threads"] for p in costs["pages"]] == sorted({1, usable})
    # a fresh page is zeroed by the kernel on its first write: >= 0.1 µs on any CPU (1-3 µs measured on the
    # EPYC), against a warm 64 MiB fill of ~3 ms; giving 16k pages back is never free either
    assert all(p["fault_us"] > 0.05 and p["free_us"] > 0 for p in costs["pages"]), costs["pages"]
    assert costs["measure_s"] > 0 and costs["dispatch_us"] > 0 and costs["profiler_self_us"] > 0
    # the same step in four forked processes, one after another: each number's least and most, and its spread
    spread = report_io.typed(Peaks, out).process_spread
    assert spread.processes == probe.SPREAD_PROCESSES["quick"] and spread.threads >= 1
    assert [g.name for g in spread.groups] == [name for name, _ in probe.SPREAD_GROUPS]
    shares = [g for g in spread.groups if g.name.endswith("share")]
    assert all(0 < g.low <= g.high < 1 for g in shares), shares
    assert sum(g.low for g in shares) <= 1 <= sum(g.high for g in shares)  # each process's three shares sum to 1
    assert spread.spread_pct == max(g.spread_pct for g in spread.groups) >= 0
    if out["contended"]:  # other processes held the CPUs: used once, never cached
        assert out["cache_path"] is None and not list(tmp_path.glob("peaks-*"))
    else:
        assert os.path.dirname(out["cache_path"]) == str(tmp_path)
        hit = probe.cached_peaks(out["key"], str(tmp_path))
        assert hit["gemm_fp32"] == out["gemm_fp32"]
    # its processes start the machine's spread history, each marked contended or not, whether the probe is cached
    history = probe.load_history(out["key"], str(tmp_path))
    assert len(history) == spread.processes and all(s.steps > 0 for s in history)


def test_cache_is_per_instruction_set(tmp_path):
    # a VM's cpu model name ("AMD EPYC") can stand for an AVX2 or an AVX-512 host: their peaks differ
    avx512 = {**PEAKS, "key": probe.machine_key("AMD EPYC", 4, "2.13.0", isa="avx,avx2,avx512f,fma")}
    probe.save_peaks(avx512, str(tmp_path))
    assert probe.cached_peaks(probe.machine_key("AMD EPYC", 4, "2.13.0", isa="avx,avx2,avx512f,fma"), str(tmp_path))
    assert probe.cached_peaks(probe.machine_key("AMD EPYC", 4, "2.13.0", isa="avx,avx2,fma"), str(tmp_path)) is None


def _sample(at: float, gemm_us: float, threads: int = 2, contended: bool = False) -> probe.SpreadSample:
    """A spread-step timing of 100 steps whose GEMM call took gemm_us, the tanh 300 µs and the copy 100 µs."""
    return probe.SpreadSample(at=at, threads=threads, gemm_s=gemm_us * 1e-4, pointwise_s=0.03, copy_s=0.01,
                              steps=100, contended=contended)


def test_the_spread_history_keeps_the_newest_samples_and_uses_only_uncontended_ones_at_the_runs_threads(tmp_path):
    key = probe.machine_key("Test CPU", 2, "2.13.0")
    first = probe.record_spread(key, [_sample(i, 55.0) for i in range(40)], str(tmp_path))
    assert len(first) == 40 and probe.load_history(key, str(tmp_path)) == first
    # twenty more: the history keeps the newest HISTORY_KEEP, oldest first
    kept = probe.record_spread(key, [_sample(100 + i, 68.0, contended=i % 2 == 0) for i in range(20)], str(tmp_path))
    assert len(kept) == probe.HISTORY_KEEP and kept[0].at == 60 - probe.HISTORY_KEEP and kept[-1].at == 119
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []  # written whole, renamed
    # another machine's key reads nothing from this file
    assert probe.load_history(probe.machine_key("Other CPU", 2, "2.13.0"), str(tmp_path)) == []
    spread = probe.history_spread(kept, threads=2, window_s=0.3)
    # 28 at 55 µs and the 10 uncontended at 68 µs: contended timings and other thread counts never count
    assert spread.processes == 38 and not spread.contended
    call = next(g for g in spread.groups if g.name == "gemm call")
    assert (call.low, call.high) == (55.0, 68.0)
    assert probe.history_spread(kept, threads=1, window_s=0.3) is None  # none at 1 thread
    few = [_sample(i, 55.0 + i % 2) for i in range(probe.HISTORY_MIN - 1)]
    assert probe.history_spread(few, threads=2, window_s=0.3) is None  # under HISTORY_MIN: the probe's own
    assert probe.history_spread(few + [_sample(99, 55.0)], threads=2, window_s=0.3).processes == probe.HISTORY_MIN


def test_the_historys_spread_spans_the_machines_states_and_one_odd_sample_does_not_set_it():
    # two speed states of a vCPU, the GEMM call 55 or 68 µs (1.24x, measured on an AVX-512 EPYC): a probe inside
    # one state reads a spread of 0; a history across both reads them, whatever order they came in
    states = [_sample(i, 55.0 if (i // 6) % 2 else 68.0) for i in range(48)]
    call = next(g for g in probe.history_spread(states, 2, 0.3).groups if g.name == "gemm call")
    logs = [math.log(55.0)] * 24 + [math.log(68.0)] * 24
    assert call.spread_pct == pytest.approx(100 * math.expm1(1.96 * statistics.stdev(logs)), abs=0.1)
    assert 20 < call.spread_pct < 25
    # one 108 µs call among them (seen once in 96 processes) is left out with the lowest: the outermost 2.5% a side
    odd = states[:47] + [_sample(47, 108.0)]
    odd_call = next(g for g in probe.history_spread(odd, 2, 0.3).groups if g.name == "gemm call")
    assert odd_call.high == 108.0 and odd_call.spread_pct < call.spread_pct + 1
    untrimmed = [math.log(s.gemm_s / s.steps) for s in odd]
    assert 100 * math.expm1(1.96 * statistics.stdev(untrimmed)) > odd_call.spread_pct + 5  # as it would have read


def test_a_sample_of_the_spread_step_is_timed_in_its_own_process_and_added_to_the_history(tmp_path):
    env = {**os.environ, "DIAGNOSE_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "diagnose.layers.efficiency.probe", "--sample-spread"]
    outs = [report_io.typed(probe.SampledSpread, json.loads(
        subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=120).stdout))
        for _ in range(2)]
    key = probe.machine_key(probe.machine.cpu_model(), probe.machine_usable(), torch.__version__, "full",
                            probe.machine.vector_isa())
    history = probe.load_history(key, str(tmp_path))
    assert [s.at for s in history] == [o.sample.at for o in outs]  # both kept, in order, contended or not
    for out in outs:
        assert out.sample.steps > 0 and min(out.sample.gemm_s, out.sample.pointwise_s, out.sample.copy_s) > 0
        assert out.history is None  # two samples are far from HISTORY_MIN: the probe's own spread stays the floor
    assert outs[1].samples == sum(1 for s in history if not s.contended)
