"""The floor of a finding's interval from the machine's spread history, against one probe's.

    .venv/bin/python benchmarks/spread_history.py [--samples 72] [--every 5] [--probes 4]
        [--write benchmarks/RESULTS.md]

The floor (report/borderline.floor) is how far one process's timing of the same small step (a GEMM, a pointwise
op, a copy) lands from another's. One probe forks 8 such processes in about 3 s; a vCPU's speed state lasts tens
of seconds, so probes minutes apart read 5-32% on one machine. Each diagnosis now adds one process's timing to
the machine's history (the last 48 kept) and, from 16 on, the history's spread is the floor.

This benchmark takes the history's samples as diagnoses do, each a process forked from one that imported torch
and ran no operator (a diagnosis forks its sampler from the run's fork server), one every `--every` seconds, and
between them `--probes` times the probe's own 8 forked processes (measure_process_spread). It writes the spread of every
window the floor could have been read from: each run of HISTORY_MIN consecutive samples (what the first runs
after a history starts read) and each of HISTORY_KEEP (a full history), beside the probes'. The target: the
full histories' floors agree within a few points where the probes' spread over a range several times wider.
Nothing else may run meanwhile (contended samples are kept and not used, as in a diagnosis).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.results import replace_section  # noqa: E402
from diagnose.layers.efficiency import probe  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402
from diagnose.report import io as report_io  # noqa: E402
from diagnose.report.borderline import HISTORY_MIN  # noqa: E402

HEADING = "## The floor from the machine's spread history against one probe's"


def _sample(window_s: float = probe.SPREAD_WINDOW_S["full"]) -> probe.SpreadSample | None:
    """One process's timing of the spread step, forked from this one (which never runs an operator)."""
    run = probe._forked(lambda: probe._spread_step(torch, window_s))
    return probe._sample(run, torch.get_num_threads()) if run else None


def _pct(spread) -> str:
    if spread is None:
        return "-"
    call = next(g for g in spread.groups if g.name == "gemm call")
    share = max(g.spread_pct for g in spread.groups if g.name.endswith("share"))
    return f"{spread.spread_pct:g}% (GEMM call {call.spread_pct:g}%, the shares' widest {share:g}%)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=72)
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--probes", type=int, default=4, help="the probe's 8 forked processes this many times")
    p.add_argument("--long", type=float, default=0.0,
                   help="beside each sample, one more with this window (s), in alternating order: does a longer "
                        "window (a pass's seconds rather than the sample's 0.3) spread less?")
    p.add_argument("--write", help="replace this benchmark's section of RESULTS.md")
    args = p.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    probe_at = {round((i + 0.5) * args.samples / args.probes) for i in range(args.probes)}
    samples: list[probe.SpreadSample] = []
    longs: list[probe.SpreadSample] = []
    probes: list[tuple[int, object]] = []
    for i in range(args.samples):
        t0 = time.monotonic()
        if args.long and i % 2:
            longs.append(_sample(args.long))
        s = _sample()
        if args.long and not i % 2:
            longs.append(_sample(args.long))
        if s is not None:
            samples.append(s)
            print(f"{i + 1:3d}/{args.samples} GEMM call {s.gemm_s / s.steps * 1e6:6.1f} µs"
                  f"{' contended' if s.contended else ''}", flush=True)
        if i in probe_at:
            data = probe.measure_process_spread(torch, "full")
            probes.append((i, report_io.typed(probe.ProcessSpread, data) if data else None))
        time.sleep(max(0.0, args.every - (time.monotonic() - t0)))
    threads = statistics.mode(s.threads for s in samples)
    usable = probe.usable_samples(samples, threads)
    calls = [s.gemm_s / s.steps * 1e6 for s in usable]
    rows = []
    for size, label in ((HISTORY_MIN, "first runs of a history"), (probe.HISTORY_KEEP, "a full history")):
        for end in range(size, len(usable) + 1, max(HISTORY_MIN // 2, (len(usable) - size) // 4 or size)):
            spread = probe.history_spread(usable[end - size:end], threads, probe.SPREAD_WINDOW_S["full"])
            rows.append((f"history, samples {end - size + 1}-{end} ({label})", _pct(spread)))
    if args.long:
        long_ok = probe.usable_samples([s for s in longs if s is not None], threads)
        size = min(probe.HISTORY_KEEP, len(long_ok))
        for end in range(size, len(long_ok) + 1, max(HISTORY_MIN // 2, (len(long_ok) - size) // 4 or size)):
            spread = probe.history_spread(long_ok[end - size:end], threads, args.long)
            rows.append((f"{args.long:g} s timings beside them, samples {end - size + 1}-{end}", _pct(spread)))
    rows += [(f"the probe's 8 processes, after sample {i + 1}", _pct(s)) for i, s in probes]
    text = "\n".join([
        HEADING, "",
        f"- When: {started:%Y-%m-%d %H:%M} UTC, {args.samples} samples one every {args.every:g} s; machine: "
        f"{cpu_model()}, {usable_cpus()[0]} usable CPUs; {platform.platform()}; Python {platform.python_version()}.",
        f"- `benchmarks/spread_history.py --samples {args.samples} --every {args.every:g} --probes {args.probes}"
        f"{f' --long {args.long:g}' if args.long else ''}`: "
        "each sample a process of its own timing the probe's step for 0.3 s, as a diagnosis adds to the history; "
        f"{len(usable)} uncontended at {threads} threads (the rest kept and not used); GEMM call "
        f"{min(calls):.1f}-{max(calls):.1f} µs, median {statistics.median(calls):.1f}.",
        "",
        "| the floor read from | spread (largest number) |",
        "| --- | --- |",
        *[f"| {a} | {b} |" for a, b in rows],
        "",
    ])
    print(text)
    if args.write:
        replace_section(args.write, HEADING, text)
    Path(tempfile.gettempdir(), "spread_history_samples.json").write_text(
        json.dumps([asdict(s) for s in samples]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
