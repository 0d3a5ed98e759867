"""Rule on the micro-benchmarks: sequential_operator.

An operator measured alone at its recorded shapes whose time barely moves
from 1 thread to all usable CPUs leaves the other CPUs idle while it runs.
Thresholds (speedup = median at 1 thread / median at the most threads
measured up to the usable CPUs, which must be >= 2; a count above them, the
run's own, measures threads waiting for CPUs):
- speedup < SEQUENTIAL_MAX_SPEEDUP (1.25): "near 1", judged on the
  speedup's interval (report/borderline.py): speedup / (1 + n) to speedup x
  (1 + n), n the two medians' IQR/median combined (their root sum of
  squares), at least borderline.RUN_NOISE_MIN, since one run's IQR does not
  see the run-to-run spread (float64_train's fp64 GEMMs took 0.79-0.95 ms
  alone from run to run, and its finding came and went around 1.25x). An
  interval straddling 1.25 is reported `low`, borderline at the severity its
  share would give;
- the speedup's noise, when microbench timed the counts interleaved (each
  row's `turns_us`, the i-th turns of the two counts side by side in one
  round), is that of the paired turns' ratios: the 95% half-width of their
  median log ratio, MEDIAN_CI_IQR x their IQR / sqrt(turns), at least the
  floor above (`speedup_noise`). A vCPU's slow stretches hit both sides of a
  pair, and the pairing cancels them where the counts' own IQRs add them: a
  4M sort's 39 turns a count, each 500-740 ms by the stretch it fell in,
  spread 22% a count, while each pair agreed within a few percent (gallery,
  2026-11-29). A noisy doubt then needs the paired ratios to disagree, not
  the rows' IQRs to be wide;
- the speedup judged is the one the CPUs would give on a machine that gave
  parallel work all its threads (`scaled_speedup`): 1 + (speedup - 1) x
  (n - 1) / (reference - 1), `reference_speedup` being a perfectly parallel
  kernel timed in the same turns (capped at n). The measured noise above
  (paired, else the rows') is carried through the scaling, and the floor,
  the run-to-run spread of the number judged, applies to the scaled value,
  whose spread the reference takes out. examples/dataloader_contention.py's
  addmm [8,8192] x [8192,512] (2-CPU AMD EPYC, 2026-12-03, five runs) ran
  1.28, 1.27, 1.11, 1.16, 1.13x beside references of 1.97, 1.96, 1.49,
  1.56, 1.66x: raw, 15% apart, medium in the two runs whose interval cleared
  the line and low (straddling) in three; scaled, 1.29, 1.28, 1.22, 1.29,
  1.20x, 8% apart, straddling in all five. Scaling the line instead, with
  the floor on the raw speedup, had made a 4M sort's interval (1.05x beside
  a 1.59x reference) straddle it; scaled, the sort reads 1.08x, 0.99-1.19x
  with the floor, under the line. Only a gain scales: a speedup under 1x
  (slower on more threads) is judged as it is. A reference under the line
  gets no scaling: it is a doubt (below);
- the 1-thread median is >= MIN_US (200 µs): torch does not split smaller
  work across threads (grain size), which is Python/dispatch overhead's
  story (python_overhead), not a sequential kernel's;
- severity from the operator's share of operator CPU time in the operator
  pass: `high` >= 30%, `medium` >= 10%, `low` >= 5%, nothing below, judged
  on the share's interval from the run's noise as every operator share is
  (report/borderline.py): a share straddling a line takes the milder side.

Why it does not scale (evidence `cause`):
- "memory_bandwidth": one thread already moves >= BANDWIDTH_BOUND_FRACTION
  (60%) of the bandwidth this machine streams at that many threads (the
  efficiency probe's memory roof, copy/triad), counting the micro-benchmark's
  bytes (inputs + outputs once, a lower bound, so the real fraction is
  higher). More threads cannot read memory faster: streaming kernels reach
  50-90% of STREAM bandwidth, so from 60% up the headroom left (< 1.7x) is
  what real kernels leave unused anyway. GPT-2's lm_head GEMV, mm
  [2,256] x [256,8000], read its 8 MB of weights at 36 GB/s on one thread
  where the machine streams 38.6 GB/s, and ran 0.97x on two. The kind stays
  `sequential_operator` (the observation is the same: threads do not help at
  this shape, and the CPUs idle while it runs), but the title says memory
  bandwidth and the suggestion is to read fewer bytes per result: more rows
  per call (batch sequences or tokens), smaller weights (bfloat16, int8).
  low_efficiency cannot carry it: the kernel runs near its roof.
- "skinny_matmul": a matrix product with a dimension under SKINNY_DIM (32)
  that is not bandwidth-bound: a GEMV-like product (one token's projection,
  GPT-2's lm_head at batch 2) that torch's BLAS runs on one thread at this
  size, streaming its weights below what the machine could. It is
  memory-bound by its shape (each weight element serves a few rows), so the
  fix is the same as for bandwidth: more rows per call, fewer bytes (and its
  weight stored contiguous for this product when it is a transposed view:
  `x @ W.t()` read the [8000,256] weight at 12.7 GB/s where a contiguous
  [256,8000] copy read at 19.7 GB/s on this project's machine).
- "sequential_kernel": otherwise.

Time at stake: the operator's share of operator time on the wall-time scale
(stake.operator_stake).

Doubts (`doubts`, severity `low`, and stake.py halves its confidence), since
the speedup itself is then uncertain:
- a measurement microbench marked `contended` (other processes held the
  CPUs), or `noisy` (IQR/median high) where that noise lets the speedup's
  interval reach 1.25x (a copy at 1.01x with a 14% IQR is sequential at
  either end; doubting it made its finding come and go with the IQR);
- a reference that did not clear the line itself (`reference_speedup` under
  SEQUENTIAL_MAX_SPEEDUP): the perfectly parallel work timed in the same
  turns did not speed up either, so the CPUs could not show a speedup at that
  moment and a flat operator says nothing about its kernel.
  examples/growing_cache.py (2-CPU AMD EPYC, 2026-12-03, one run of five):
  tanh 1.08x beside a reference of 1.01x made a medium finding (a copy in
  that run: 1.08x); of the 120 micro-benchmark references in 20 gallery runs
  that day, one other was under the line (1.21x), nine in ten above 1.47x;
- a matrix multiply that is not bandwidth-bound whose output has at least
  LARGE_GEMM_DIM x LARGE_GEMM_DIM (256 x 256) elements, in rows and columns
  of at least SKINNY_DIM, with K >= 256 (`splits`): oneDNN/MKL split such a
  GEMM's output into blocks across threads (256 x 256 is at least 4 of their
  128-wide blocks, 64 of their 32-wide ones; 64 x 1024 is 8 of 64 x 128) and
  K is long enough to amortise packing; the probe's own square GEMMs start
  at this size and scale there. A flat result at such a shape is a disturbed
  measurement (e.g. the hypervisor taking a vCPU, or two vCPUs sharing one
  core's matrix unit, which /proc/stat does not show), not a sequential
  kernel: examples/autocast_weights.py's bf16 addmm [64,4096] x [4096,1024]
  ran 1.57-1.90x on 2 threads in 5 of 8 gallery runs on this project's
  Xeon VM and 0.99-1.03x in 3, each of those in a process whose 1-thread
  time was 1.27-1.30 ms instead of 2.1-2.4 ms, with the parallel reference
  beside it at 1.47-1.63x (2026-11-29). A skinny GEMM (a row or column
  count under 32: a GEMV, one token's projection) or a small output is
  judged like any operator, bandwidth test included. (Until 2026-11-29 it
  took M, N and K all >= 256, which left that addmm, M=64, out.)
"""

from __future__ import annotations

import math
import statistics

from diagnose.findings.stake import operator_stake
from diagnose.findings.suggestions import (
    MATMUL,
    bandwidth_text,
    matmul_dims,
    op_class,
    suggestion_for,
    under_dropout,
    weight_init_row,
)
from diagnose.report import borderline
from diagnose.report.model import PEAKS_CONTENDED_DOUBT, Finding, MicrobenchRow, Report

SEQUENTIAL_MAX_SPEEDUP = 1.25
PAIRED_MIN_TURNS = 4  # paired turns that give the speedup its own interval (speedup_noise)
SHARE_HIGH_PCT = 30.0
SHARE_MEDIUM_PCT = 10.0
MIN_US = 200.0  # an op shorter than this alone is too small to split across threads, not a sequential kernel
SHARE_MIN_PCT = 5.0  # below this share of operator time an idle CPU costs too little to report
LARGE_GEMM_DIM = 256
BANDWIDTH_BOUND_FRACTION = 0.6
SKINNY_DIM = 32  # as findings/efficiency.py: a dimension this small leaves a GEMM kernel's register tile empty


def _key(row: MicrobenchRow) -> tuple:
    return row.op, repr(row.input_shapes), repr(row.dtypes)


def gb_per_s(row: MicrobenchRow) -> float | None:
    """A micro-benchmark row's achieved GB/s (its own, else its bytes over its median)."""
    if row.gbytes_per_s:
        return float(row.gbytes_per_s)
    if row.bytes and row.median_us:
        return row.bytes / (row.median_us * 1e3)
    return None


def splits(dims: tuple[int, int, int]) -> bool:
    """oneDNN/MKL split this GEMM's output across threads (module docstring): an output of at least LARGE_GEMM_DIM^2
    elements in rows and columns of at least SKINNY_DIM, and K >= LARGE_GEMM_DIM."""
    m, n, k = dims
    return m * n >= LARGE_GEMM_DIM ** 2 and min(m, n) >= SKINNY_DIM and k >= LARGE_GEMM_DIM


def _rows_noise(one: MicrobenchRow, most: MicrobenchRow) -> float:
    """The speedup's relative noise from the two rows' IQR/median, combined (their root sum of squares)."""
    return math.hypot(one.noise_pct or 0.0, most.noise_pct or 0.0) / 100


def speedup_noise(one: MicrobenchRow, most: MicrobenchRow) -> tuple[float, float | None, int]:
    """(the speedup's relative noise, the paired turns' part of it or None, the pairs it took): from the counts'
    paired turns when there are at least PAIRED_MIN_TURNS, the 95% half-width of their median log ratio
    (borderline.median_halfwidth of the ratios' IQR); otherwise the two medians' IQR/median combined. At least
    RUN_NOISE_MIN either way (module docstring)."""
    logs = [math.log(a / b) for a, b in zip(one.turns_us, most.turns_us) if a > 0 and b > 0]
    if len(logs) >= PAIRED_MIN_TURNS:
        q = statistics.quantiles(logs, n=4, method="inclusive")
        paired = math.expm1(borderline.median_halfwidth(q[2] - q[0], len(logs)))
        return max(borderline.RUN_NOISE_MIN, paired), paired, len(logs)
    return max(borderline.RUN_NOISE_MIN, _rows_noise(one, most)), None, 0


def scaled_speedup(speedup: float, measured: float, n: int, reference: float | None) -> tuple[float, float]:
    """(the speedup judged against the line, its relative noise): `speedup` on `n` threads scaled by the perfectly
    parallel `reference` timed beside it (module docstring), with `measured`, the speedup's own relative noise
    (paired turns, else the rows' IQRs), carried through the scaling, at least RUN_NOISE_MIN on the scaled value.
    Unscaled (the floor on the speedup itself) without a reference or with one under the line, which the rule
    doubts instead."""
    if reference is None or reference < SEQUENTIAL_MAX_SPEEDUP or n < 2:
        return speedup, max(borderline.RUN_NOISE_MIN, measured)
    slope = (n - 1) / (min(reference, float(n)) - 1)

    def scale(s: float) -> float:  # a gain scales; a slowdown (under 1x) is no parallel gain and stays as it is
        return 1 + (s - 1) * slope if s > 1 else s

    value = scale(speedup)
    low, high = scale(speedup / (1 + measured)), scale(speedup * (1 + measured))
    spread = max(high / value - 1, value / low - 1)
    return value, max(borderline.RUN_NOISE_MIN, spread)


def sequential_operator(report: Report) -> list[Finding]:
    cases: dict[tuple, list[MicrobenchRow]] = {}
    for row in report.microbenchmarks:
        if row.median_us and row.threads:
            cases.setdefault(_key(row), []).append(row)
    peaks = report.efficiency.peaks if report.efficiency else None
    out = []
    for rows in cases.values():
        one = next((r for r in rows if r.threads == 1), None)
        # the most threads the CPUs can run at once: a count above the usable CPUs (the run's own, 8 on 2 CPUs)
        # measures the threads waiting for each other, and "N - 1 of the N CPUs idle" would name CPUs not there
        usable = report.machine.usable_cpus
        most = max((r for r in rows if not usable or r.threads <= usable), key=lambda r: r.threads, default=one)
        if one is None or most.threads < 2 or one.median_us < MIN_US:
            continue
        speedup = one.median_us / most.median_us
        _, paired, pairs = speedup_noise(one, most)
        measured = paired if paired is not None else _rows_noise(one, most)
        judged, rel = scaled_speedup(speedup, measured, most.threads, most.reference_speedup)
        slowest, fastest = borderline.interval(judged, rel)  # the (scaled) speedup's interval
        if slowest >= SEQUENTIAL_MAX_SPEEDUP or _weight_init(report, one):
            continue  # weight initialisation is set-up: never a suspect (a report from before the layer skipped it)
        share = float(one.self_pct or _share(report, one) or 0.0)
        # the share's lines on its interval from the run's noise, as every operator share's (report/borderline.py)
        by_share, share_border = borderline.grade(
            share, borderline.noise(report),
            ((SHARE_HIGH_PCT, "high"), (SHARE_MEDIUM_PCT, "medium"), (SHARE_MIN_PCT, "low")),
            "share of operator CPU time")
        if by_share is None:
            continue
        n, op = most.threads, one.op or ""
        bandwidth, roof = gb_per_s(one), (peaks.bandwidth_peak(n) if peaks else None)
        fraction = bandwidth / roof if bandwidth and roof else None
        bound = fraction is not None and fraction >= BANDWIDTH_BOUND_FRACTION
        dims = matmul_dims(op, one.input_shapes) if MATMUL.match(op) else None
        # never None: the interval's low end is under the line (above); straddling it, `low`
        scaled = judged != speedup
        severity, border = borderline.grade(
            judged, rel, ((SEQUENTIAL_MAX_SPEEDUP, by_share),),
            f"speedup from 1 to {most.threads} threads" + (", scaled by the parallel reference's" if scaled else ""),
            unit="x", lower_is_worse=True)
        border = border or share_border  # the speedup's own line first: it decides whether there is a finding
        doubts = [f"{r.threads}-thread run contended by other processes" for r in (one, most) if r.contended]
        if fastest >= SEQUENTIAL_MAX_SPEEDUP:  # noise that can reach the line: the paired turns', else the rows'
            if paired is None:
                doubts += [f"{r.threads}-thread run noisy (IQR {r.noise_pct:.0f}% of the median)"
                           for r in (one, most) if r.noisy]
            elif paired > borderline.RUN_NOISE_MIN:
                doubts.append(f"its paired 1- and {most.threads}-thread turns disagree (the speedup's 95% interval "
                              f"±{100 * paired:.0f}%)")
        if most.reference_speedup is not None and most.reference_speedup < SEQUENTIAL_MAX_SPEEDUP:
            doubts.append(f"a perfectly parallel reference beside it ran {most.reference_speedup:.2f}x on {n} threads, "
                          f"under the {SEQUENTIAL_MAX_SPEEDUP}x line itself: the CPUs could not show a speedup then")
        elif dims and splits(dims) and not bound:
            doubts.append(f"a GEMM with an output of at least {LARGE_GEMM_DIM} x {LARGE_GEMM_DIM} and K >= "
                          f"{LARGE_GEMM_DIM} (M={dims[0]}, N={dims[1]}, K={dims[2]}) splits across threads: a flat "
                          "result says the measurement was disturbed"
                          + (f" (a perfectly parallel reference beside it ran {most.reference_speedup:.2f}x)"
                             if most.reference_speedup else "") + "; re-measure before trusting it")
        if doubts:
            severity = "low"
        skinny = bool(dims) and min(dims) < SKINNY_DIM and not bound
        evidence = {
            "cause": "memory_bandwidth" if bound else "skinny_matmul" if skinny else "sequential_kernel",
            "input_shapes": one.input_shapes, "dtypes": one.dtypes,
            "median_us_1_thread": round(one.median_us, 1), f"median_us_{n}_threads": round(most.median_us, 1),
            "threads": n, "speedup": round(speedup, 3), "parallel_efficiency": round(speedup / n, 3),
            "noise_pct_1_thread": one.noise_pct, f"noise_pct_{n}_threads": most.noise_pct,
            "threshold_speedup": SEQUENTIAL_MAX_SPEEDUP, "reference_speedup": most.reference_speedup,
            "speedup_scaled": round(judged, 3) if scaled else None,
            "paired_turns": pairs, "speedup_noise": round(rel, 3), "share_pct": round(share, 1),
            "gb_per_s_1_thread": round(bandwidth, 2) if bandwidth else None,
            "roof_gb_per_s": roof, "bandwidth_fraction": round(fraction, 3) if fraction is not None else None,
            "threshold_bandwidth_fraction": BANDWIDTH_BOUND_FRACTION,
            "reproducer": one.reproducer,
        }
        if dims:
            evidence.update(gemm_mnk=list(dims), threshold_gemm_dim=LARGE_GEMM_DIM)
        contended = bool(bound and peaks and peaks.contended)
        if contended:
            evidence["peaks_contended"] = True  # a low roof reads as saturated: a doubt, which halves the confidence
        short = op.split("::")[-1]
        shapes = ", ".join(str(x).replace(" ", "") for x in one.input_shapes if x != []) or "-"
        times = (f"{one.median_us / 1e3:.2f} ms on 1 thread vs {most.median_us / 1e3:.2f} ms on {n} "
                 f"({speedup:.2f}x"
                 + (f", a perfectly parallel reference beside it {most.reference_speedup:.2f}x"
                    if most.reference_speedup else "")
                 + (f": {judged:.2f}x on CPUs that gave it all {n} threads" if scaled else "")
                 + f"); it takes {share:.0f}% of operator time")
        reproducer = f"{evidence['reproducer'] or 'The micro-benchmark'} reproduces it alone."
        if bound:
            title = (f"{op} at {shapes} is limited by memory bandwidth, not threads: one thread already moves "
                     f"{bandwidth:.3g} GB/s, {fraction:.0%} of the {roof:.3g} GB/s this machine streams; {times}")
            # a copy's fewer bytes are no copy: its cause's own change (autocast's cast: the weights converted
            # once, not "a smaller dtype", which is what the cast makes)
            fewer = (suggestion_for(report, op, one.input_shapes, one.dtypes, one.source) if op_class(op) == "copy"
                     else bandwidth_text(dims, one.input_shapes, one.dtypes))
            suggestion = (f"More threads cannot read memory faster: {short} moves at one thread "
                          f"{fraction:.0%} of what {n} threads stream here. {fewer} {reproducer}")
        elif skinny:
            m_, n_, k_ = dims
            title = (f"{op} at {shapes} is a skinny matrix product (M={m_}, N={n_}, K={k_}) that runs on one thread"
                     + (f", streaming {bandwidth:.3g} GB/s where {n} threads stream {roof:.3g}" if bandwidth and roof
                        else "") + f": {times}")
            layout = ""
            if not one.contiguous or _transposed_input(report, one):
                layout = (" Its weight is a transposed view (x @ W.t(), nn.Linear's layout): a product over a "
                          "contiguous copy made once (W_t = W.t().contiguous() outside the loop) streams faster.")
            suggestion = (f"Each weight element of {short} serves only {m_} row(s), so it is bound by reading the "
                          f"weights, and torch's BLAS does not split a product this small across threads. "
                          + bandwidth_text(dims, one.input_shapes, one.dtypes) + layout + " " + reproducer)
        elif doubts:  # a flat result this run cannot vouch for: say so before any advice
            title = f"{op} at {shapes} did not speed up with threads in its micro-benchmark, a doubted result: {times}"
            suggestion = (f"Re-measure before acting ({'; '.join(doubts)}): {reproducer.rstrip('.')}, on a quiet "
                          f"machine. Only if {short} stays flat there do {n - 1} of the {n} CPUs idle while it runs; "
                          "then overlap it with other work or split it into independent pieces.")
        else:
            title = f"{op} at {shapes} does not speed up with threads: {times}"
            advice = suggestion_for(report, op, one.input_shapes, one.dtypes, one.source)
            # a dropout's mask is a layer of the model's forward: nothing to move aside or split
            overlap = "" if under_dropout(report, op, one.input_shapes) else (
                " Or overlap it with other work (torch.jit.fork, or move it into a DataLoader worker), or split it "
                "into independent pieces that run in parallel.")
            suggestion = (f"While {short} runs, {n - 1} of the {n} CPUs idle: the kernel is sequential at this "
                          f"shape. {advice}{overlap} {reproducer}")
        out.append(Finding(kind="sequential_operator", severity=severity, title=title, op=op or None,
                           location=one.source, evidence=evidence, suggestion=suggestion,
                           layer="microbench", stake=operator_stake(report, evidence["share_pct"]),
                           doubts=doubts + ([PEAKS_CONTENDED_DOUBT] if contended else []),
                           borderline=None if doubts else border))
    return out


def _weight_init(report: Report, row: MicrobenchRow) -> bool:
    return any(weight_init_row(report, op) for op in report.operators
               if op.name == row.op and op.input_shapes == row.input_shapes)


def _transposed_input(report: Report, row: MicrobenchRow) -> bool:
    """The operator row behind a micro-benchmark has a non-contiguous tensor input (a transposed view)."""
    for op in report.operators:
        if op.name == row.op and op.input_shapes == row.input_shapes:
            return bool(op.contiguous) and False in op.contiguous
    return False


def _share(report: Report, row: MicrobenchRow) -> float | None:
    for op in report.operators:
        if op.name == row.op and op.input_shapes == row.input_shapes:
            return op.self_pct
    return None
