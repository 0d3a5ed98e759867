"""Time at stake, confidence, severity from the stake, ranking and de-duplication of findings.

Findings are ranked, settled and merged by their typed fields (report/model.py:
`stake`, `observation`, `doubts`, `place`, `rule_severity`, `severity_basis`,
`severity_from`, `also`), and nothing here writes their `evidence`, which
holds the rule's own measurements (only its `input_shapes` is read, to tell
which merged pieces are about the same time).

Time at stake. Every finding carries a `stake` (model.Stake): `pct`, an
estimate of the share of the run's (uninstrumented) wall time that fixing it
could win, and `basis`, how it was estimated (`upper_bound` when it is a
ceiling). Each rule sets its own; `fill` gives a rule that sets none an
unknown one. The layers measure shares of different things (operator self
CPU time, the cProfile pass, thread runnable time), so the rules put them on
one scale:

- operator findings (hot_operator, copy_overhead, memory_churn, and the
  microbench and efficiency rules, `operator_stake`): the operator share
  times `operator_wall_fraction`, the share of the run spent inside torch
  operators (the cProfile pass's torch built-in share when the python layer
  ran, else operator self CPU time over the recorded span of the operator
  pass, `Report.recorded_span`);
- python_overhead: the function's share of the cProfile pass (that pass
  inflates Python, so this is an upper bound);
- undersubscription and oversubscription from the target's own thread
  count: what the doctor's one-point trial of the recommended count measured
  (1 - 1/speedup of the step; 0 when it found no gain), findings/threads.py;
- oversubscription otherwise: the throughput the thread sweep measured to
  gain, as wall time saved (1 - 1/(1 + gain)), else the run-queue wait share
  (an upper bound);
- external_contention: the run-queue wait share; undersubscription without
  a trial: the idle usable CPUs' share (perfect scaling, an upper bound); memory_churn:
  the fresh pages it faults in per step at 1 µs a fault (the doctor's
  page_faults estimate); without steps the run's faults over its wall time
  (an upper bound); without a fault count none (not measured).

Confidence (`stake.confidence` and `stake.confidence_why`): the share of the
stake to believe, 1.0 unless
- the estimate is an upper bound (`stake.upper_bound`; its basis says
  UPPER_BOUND): x 0.5, since the bounds above are typically about twice the
  real win (cProfile's slowdown of Python is 1.5-3x on the project's
  examples; perfect scaling is
  ceilings);
- the measurement behind the finding is doubted (`doubts`, set by its rule:
  a noisy or contended micro-benchmark, a flat result where the shape says
  it should scale, roofs measured while other processes held the CPUs,
  model.PEAKS_CONTENDED_DOUBT): x 0.5.
`stake.expected_pct` = pct x confidence is what ranking and severity use.

Severity from the stake (`settle`, on every finding as its rule returns it):
the rule's severity is its judgement of the cause; the stake bounds it so
that the two never contradict:
- expected < MEDIUM_MIN_PCT (5%, the smallest change `diagnose compare` can
  tell from noise, compare.MIN_FLOOR_PCT): at most `low`, since a fix could
  not be confirmed by a before/after run;
- expected < HIGH_MIN_PCT (20%: a fifth of the run, a change no one needs a
  statistic to see): at most `medium`;
- expected >= HIGH_MIN_PCT: at least `medium`, unless the measurement is
  doubted or the finding is an `observation` (set by its rule: a healthy
  compute kernel's hot_operator, where a healthy model spends its time;
  undersubscription from serial work, whose cause the python and operators
  findings name), or its rule made it `low` as borderline (its own number
  straddles the line from which it is a finding at all: raised, it would be
  medium in the runs whose interval reached the line and absent in the
  others; a kernel at 23% of its roof alone, 20.8-25.2% within the noise of
  a real report, tests/data/findings/dataloader_contention_report.json,
  was raised to medium by its 34% at stake).
Each line is judged on the stake's interval (report/borderline.py): its
milder end, borderline when the other end's severity differs. A stake from
trials that ran their nine rounds (`on_point`) is judged on its point, their
median, borderline when an end of the interval is across a line, but only
between medium and high: the 5% line is where a fix can be confirmed by a
before/after run at all, so a finding is medium only when its interval's low
end clears it, whatever its point. examples/transpose_copy.py's jemalloc
measured 1.05-1.08x in five runs (gallery set AC), medians 4.9-7.6% saved
around the 5% line and every interval reaching under it: judged on the point
it was medium in two runs and low in three; on the interval, low, borderline
medium, in all five. The 20% line is one of size, a change no one needs a
statistic to see, and there the median moves less from run to run than its
order-statistic ends (examples/conv_nchw.py below).
A finding without a stake keeps its rule's severity. `rule_severity` and
`severity_basis` say when the stake changed it. `--fail-on` reads the
settled severity.

Ranking (`rank`): actionable findings first, by expected share (largest
first), then severity; observations last, whatever their share: a large
share of time in a healthy GEMM is where a model should spend it.

De-duplication (`dedup`): the findings at the same `location` (file:line)
and the same library line (`place.library_line`, findings/place.py: inside a
library model every finding sits at the user's one line that calls the model,
and only the library line tells two places apart) become one finding,
whichever layers raised them: the primary is the cause
rather than the symptom (any kind before low_efficiency before hot_operator,
then the larger expected share) among the pieces about the time that leads
(a cause's; between two symptoms, low_efficiency and hot_operator of two
operators of one statement, the larger expected share, then the operator's
larger share of operator time: they are ordered by their time, not by their
kinds) of those about the same time as
one at the group's highest severity (autograd_in_inference and
memory_growth, named causes, at any: a low python_overhead about another
operator of the statement, 0.01% at stake, once led a line whose
hot_operator was medium), never a piece `low` as borderline in a group
above low (its number straddles the line from which it is a finding at
all, so it is there in some runs and not in others: fresh_temporaries.py's
low_efficiency at 27% of the roof renamed its line in two runs of five), nor
an observation in a group with a piece that is not one (a low_efficiency
whose output's fresh pages account for it says the kernel is not what is
slow);
the others go to its `also`, as they are;
the merged severity is the group's highest (`severity_from` names the piece
it came from when that is not the primary)
and its stake (with its confidence) the group's largest (the pieces
overlap, so they are not added), both over the pieces about the same time:
the primary's own operator at its own input shapes (when both pieces record
shapes, evidence `input_shapes`), or the whole line when either has no
operator (python_overhead).
Another operator of the same statement (`tanh(x @ x)`: a low_efficiency tanh
beside a healthy mm), or the same operator at other shapes (one `x @ w` line
called with two batch sizes), rides along in `also` without lending the
primary its severity or its stake.
Findings without a location are merged only where a line's finding holds
their time and its rule says so by listing them in its `also`
(`_fold_unplaced`): memory_churn takes the doctor's page_faults finding (the
fresh pages its allocations fault in; its stake, and its measured change as
the first thing to try). The two had one stake and one severity and were
listed apart, the churn first on the tie: BERT inference read "reuse
buffers" at the model's line above the jemalloc launch line measured 1.59x
faster, for the same time. One layer's findings at a line
merge as two layers' do: the grouping must not hang on whether a second
layer happened to flag the line. It did until 2026-11-27, and
examples/autocast_weights.py:36 came out as one finding (copy_overhead with
the casts' hot_operator and low_efficiency under it) in the runs where the
efficiency layer flagged the cast, and as three (copy_overhead and two
hot_operator) where it did not: the same diagnosis, listed two ways.
"""

from __future__ import annotations

import dataclasses

from diagnose import budget as budget_mod
from diagnose.compare import MIN_FLOOR_PCT
from diagnose.config import HIGH_MIN_PCT
from diagnose.report import borderline
from diagnose.report.model import Borderline, Finding, Report, Stake, StepBudget, Trial, saving_pct

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}
# the rest are causes (tier 0); autograd recording in inference is one cause of the framework overhead that
# python_overhead measures at the same line, so it is named first (and borrows that line's stake)
SYMPTOM_TIER = {"autograd_in_inference": -1, "low_efficiency": 1, "hot_operator": 2}
# memory kept step after step is the cause at its line of what the operators measure there (a torch.cat buffer
# re-made bigger each step is the cat's growing time and its memory_churn): named first, with that line's stake
SYMPTOM_TIER["memory_growth"] = -1
UPPER_BOUND = "an upper bound"  # in the basis of a Stake with upper_bound: says the estimate is a ceiling
UPPER_BOUND_FACTOR = 0.5
DOUBTED_FACTOR = 0.5
MEDIUM_MIN_PCT = MIN_FLOOR_PCT
UNKNOWN = Stake(pct=None, basis="unknown")


def _clamp(x: float) -> float:
    return max(0.0, min(1.0, x))


def operator_wall_fraction(report: Report) -> tuple[float, str]:
    """(share of the run spent in torch operators, 0..1; where that number comes from)."""
    s = report.python_summary
    if s is not None and s.total_s:
        return _clamp(float(s.operator_share)), "operator share x torch built-ins' share of the cProfile pass"
    total_us = report.operator_summary.total_self_cpu_us if report.operator_summary else None
    span, _ = report.recorded_span()
    if total_us and span:
        return _clamp(total_us / (span * 1e6)), "operator share x operator self CPU time over the operator pass"
    return 1.0, "operator share (operators assumed to be the whole run)"


def operator_stake(report: Report, share_pct: float | None) -> Stake:
    """The stake of a finding about `share_pct`% of operator self CPU time, with its interval from this run's
    noise (report/borderline.py)."""
    if share_pct is None:
        return UNKNOWN
    fraction, basis = operator_wall_fraction(report)
    pct = float(share_pct) * fraction
    low, high = borderline.interval(pct, borderline.noise(report))
    return Stake(pct=round(pct, 2), basis=basis, low=round(low, 2), high=round(high, 2))


def _gain(speedup: float | None) -> float | None:
    """The share of the step a speedup saves (model.saving_pct), to 0.01%: an end of a trial's interval."""
    saved = saving_pct(speedup)
    return None if saved is None else round(saved, 2)


def measured(trial: Trial, basis: str) -> Stake:
    """The stake a trial measured: 1 - 1/speedup of the step, with its interval from the trial's 95% interval of
    the speedup (the measurement's own, which severity is judged against, rather than the run-to-run floor
    around the point: two runs of examples/conv_nchw.py measured jemalloc 1.58x (1.19-1.79x) and 1.24x
    (1.21-1.78x), high in one and medium in the other by their points, the same by their intervals)."""
    pct = trial.saved_pct  # the number the step budget's allocator slice takes too
    low, high = _gain(trial.ci_low), _gain(trial.ci_high)
    if pct is None or low is None or high is None:
        return Stake(pct=pct, basis=basis)
    return Stake(pct=pct, basis=basis, low=min(low, pct), high=max(high, pct), on_point=on_point([trial]))


def on_point(trials: list[Trial]) -> bool:
    """Whether a stake from these trials is judged on its point between medium and high (settle): every one ran its
    rounds (doctor/trials.py `method` "rounds": the median of nine rounds, not three), so the point moves less from
    run to run than the ends of its sign-test interval, the second-slowest and second-fastest round.
    examples/conv_nchw.py's jemalloc
    over five runs: medians a saving of 24-31%, above the 20% a high finding needs in every run; low ends 13-26%,
    high in two runs and medium in three (benchmarks/RESULTS.md, gallery set O)."""
    return bool(trials) and all(t.method == "rounds" for t in trials)


def unsure_stake(estimate: Stake, trials: list[Trial]) -> Stake:
    """The stake of a finding whose trials could not tell (doctor/trials.could_win): its rule's own estimate, at
    most the largest saving their 95% intervals reach, and judged, as a win's stake is (`measured`), on those
    intervals: from the largest saving their low ends show (0 where they reach under no change) to that reach.
    A win and a could-not-tell of one change are then judged on one kind of interval: examples/growing_cache.py's
    jemalloc won 1.10x (1.05-1.62x) in one run, low at its 4.6% low end, while three runs whose trials could not
    tell were medium on the check's 13-17% estimate with the least run-to-run spread around it."""
    told = [t for t in trials if t.ci_low is not None and t.ci_high is not None]
    if estimate.pct is None or not told:
        return estimate
    low = max(_gain(t.ci_low) or 0.0 for t in told)
    reach = max(_gain(t.ci_high) or 0.0 for t in told)
    pct = round(max(low, min(float(estimate.pct), reach)), 2)
    return dataclasses.replace(estimate, pct=pct, low=round(low, 2), high=round(max(reach, pct), 2),
                               on_point=on_point(told),
                               basis=f"{estimate.basis}; the trials could not tell, so judged on their intervals "
                                     f"({low:.3g}-{reach:.3g}% saved)")


def stake(finding: Finding) -> float:
    value = finding.stake.pct if finding.stake else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def confidence(finding: Finding) -> tuple[float, list[str]]:
    """(share of the stake to believe, why it is below 1)."""
    factor, why = 1.0, []
    if finding.stake is not None and finding.stake.upper_bound:
        factor *= UPPER_BOUND_FACTOR
        why.append("the time at stake is an upper bound")
    if finding.doubts:
        factor *= DOUBTED_FACTOR
        why.append("the measurement is doubted: " + "; ".join(finding.doubts))
    return factor, why


def expected(finding: Finding) -> float:
    """Time at stake x its confidence: what ranking and severity use."""
    c = finding.stake.confidence if finding.stake else None
    return stake(finding) * (float(c) if isinstance(c, (int, float)) else confidence(finding)[0])


def observation(finding: Finding) -> bool:
    """A finding that describes where the time goes rather than what to fix (its rule sets `observation`:
    a healthy compute kernel's hot_operator, serial work's undersubscription)."""
    return bool(finding.observation)


def _bounded(value: float, severity: str, finding: Finding) -> tuple[str, str | None]:
    """The rule's severity bounded by an expected share of `value`% (module docstring), and why it changed."""
    if value < MEDIUM_MIN_PCT:
        return "low", f"under the {MEDIUM_MIN_PCT:g}% a medium finding needs"
    if value < HIGH_MIN_PCT and severity == "high":
        return "medium", f"under the {HIGH_MIN_PCT:g}% a high finding needs"
    if (value >= HIGH_MIN_PCT and severity == "low" and not finding.doubts and not observation(finding)
            and finding.borderline is None):  # a rule's borderline low: its own number straddles its line
        return "medium", f"at least the {HIGH_MIN_PCT:g}% that makes a finding medium or more"
    return severity, None


def settle(finding: Finding) -> Finding:
    """Record the confidence and bound the rule's severity by the expected share (module docstring), judged at
    both ends of the stake's interval: the milder end's severity, borderline when the other end's differs
    (report/borderline.py); a stake `on_point` on its point once its low end clears the medium line (module
    docstring), borderline when an end's differs. A stake its rule
    gave no interval gets borderline.RUN_NOISE_MIN's, the least run-to-run spread of a time measured here, not
    the run's own noise: the steps' spread is not a cProfile share's (a loaded run's steps spread 86%, which made
    a python_overhead at 93% borderline), while contiguous_copies' page-fault stake came out 14-21% over five
    quiet runs, medium in one of them."""
    if finding.stake is None:
        return finding
    factor, why = confidence(finding)
    finding.stake = dataclasses.replace(finding.stake, confidence=factor, confidence_why=why)
    if not isinstance(finding.stake.pct, (int, float)):
        return finding
    value, rule = expected(finding), finding.severity
    if finding.stake.low is None and finding.stake.high is None:  # the least run-to-run spread of a time
        lo, hi = borderline.interval(float(finding.stake.pct), borderline.RUN_NOISE_MIN)
        finding.stake = dataclasses.replace(finding.stake, low=round(lo, 2), high=round(hi, 2))
    low = finding.stake.low * factor if finding.stake.low is not None else value
    high = finding.stake.high * factor if finding.stake.high is not None else value
    # judged on the milder end, or on the point (Stake.on_point) once the milder end clears the medium line, the
    # other end's severity shown
    judged = value if finding.stake.on_point and low >= MEDIUM_MIN_PCT else low
    severity, basis = _bounded(judged, rule, finding)
    at_high, _ = _bounded(high, rule, finding)
    other, worse = (high, at_high) if at_high != severity else (low, _bounded(low, rule, finding)[0])
    if finding.borderline is not None and _bounded(high, finding.borderline.would_be, finding)[0] == severity:
        finding.borderline = None  # the rule's other end would be bounded back to this severity
    if worse != severity and (finding.borderline is None or severity != rule):  # the rule's own number first
        a, b = sorted((judged, other))
        line = HIGH_MIN_PCT if a < HIGH_MIN_PCT <= b else MEDIUM_MIN_PCT
        finding.borderline = Borderline(measure="expected time at stake", value=round(value, 3), low=round(low, 3),
                                        high=round(high, 3), threshold=line, unit="% of wall time", would_be=worse)
    if severity != rule:
        finding.rule_severity = rule
        finding.severity_basis = (f"{value:.3g}% of wall time expected at stake "
                                  f"({stake(finding):.3g}% x confidence {factor:g}), {basis}")
        finding.severity = severity
    return finding


def bound(finding: Finding, budget: StepBudget | None) -> Finding:
    """A finding's time at stake never exceeds the step-budget slice its time is part of (budget.SLICE_OF). Bounded
    by a slice that is its whole time (SLICE_IS_STAKE), the stake is that measured slice, no longer an upper bound,
    unless the slices over-count the step beyond the run-to-run noise: then some slice holds time another has,
    and none is lent as a measurement (a scripted GRU's forward read as 99% Python beside 95% in kernels)."""
    cap = budget_mod.cap_pct(budget, finding.kind)
    if cap is None or finding.stake is None or not isinstance(finding.stake.pct, (int, float)):
        return finding
    limit, names, noise = cap
    if finding.stake.pct > limit + 1e-6:  # a slice that is the stake (a measured allocator saving) is not a cap
        adds_up = budget.unexplained_share >= -borderline.RUN_NOISE_MIN
        measured = finding.kind in budget_mod.SLICE_IS_STAKE and adds_up  # the slice is this finding's time
        low, high = finding.stake.low, finding.stake.high
        if noise is not None:  # the slice's own interval: a difference of larger terms (BudgetSlice.noise_share)
            low = max(0.0, limit - noise) if low is None else min(low, max(0.0, limit - noise))
            high = limit + noise if high is None else min(high, limit + noise)
        else:
            low = None if low is None else min(low, limit)
            high = None if high is None else min(high, limit)
        finding.stake = dataclasses.replace(
            finding.stake, pct=round(limit, 2), upper_bound=finding.stake.upper_bound and not measured,
            low=None if low is None else round(low, 2), high=None if high is None else round(high, 2),
            basis=f"{finding.stake.basis}; at most the step budget's {names} ({limit:.3g}% of the step)"
                  + (", measured: no longer an upper bound" if measured else ""))
    return finding


def fill(finding: Finding) -> Finding:
    """Give a finding from a rule that does not estimate its time at stake an unknown one, then settle it."""
    if finding.stake is None:
        finding.stake = UNKNOWN
    return settle(finding)


def rank_key(f: Finding) -> tuple:
    return (observation(f), -expected(f), SEVERITY_RANK.get(f.severity, 3))


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=rank_key)


def _same_time(a: Finding, b: Finding) -> bool:
    """Pieces about the same time: the whole line (either has no operator), or one operator at one shape."""
    if a.op is None or b.op is None:
        return True
    shapes_a, shapes_b = a.evidence.get("input_shapes"), b.evidence.get("input_shapes")
    return a.op == b.op and (shapes_a is None or shapes_b is None or shapes_a == shapes_b)


def _lead(f: Finding) -> tuple:
    """Which piece's time leads a line (dedup): a named cause (tier < 0), then a cause (tier 0: memory_churn
    before the hot_operator of the operator its fresh pages fault in), then a symptom, each by rank_key, then the
    operator's share of operator time (evidence `share_pct`). Between two symptoms the tier orders the pieces
    about one time, not two operators': examples/allocation_churn.py:18
    (`acc + torch.relu(y)`, 2-CPU AMD EPYC, 2026-12-03) was named by add's hot_operator (24% of operator time) in
    three runs of five and by clamp_min's low_efficiency (22%) in the two where its efficiency's interval cleared
    the 25% line (17.5%, against 22.8-23.7% in the others), both medium, both at the step budget's kernel slice."""
    return (min(SYMPTOM_TIER.get(f.kind, 0), 1), *rank_key(f), -float(f.evidence.get("share_pct") or 0.0))


def _fold_unplaced(findings: list[Finding]) -> list[Finding]:
    """A finding without a line whose time a line's finding holds, as its rule says by listing it in its `also`
    (memory_churn takes the doctor's page_faults finding: the fresh pages its allocations fault in), leaves the
    list for that `also`, as it was settled: one cause, one finding (module docstring)."""
    unplaced = {(f.kind, f.layer): f for f in findings if not f.location}
    taken: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        if f.location and any((a.kind, a.layer) in unplaced for a in f.also):
            taken.update((a.kind, a.layer) for a in f.also if (a.kind, a.layer) in unplaced)
            f = dataclasses.replace(f, also=[unplaced.get((a.kind, a.layer), a) for a in f.also])
        out.append(f)
    return [f for f in out if f.location or (f.kind, f.layer) not in taken]


def dedup(findings: list[Finding]) -> list[Finding]:
    """Merge the findings at each location into one (see the module docstring)."""
    findings = _fold_unplaced(findings)
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        if f.location:  # inside a library model every finding is at the one line calling it: the library line tells
            groups.setdefault((f.location, f.place.library_line if f.place else None), []).append(f)
    merged: dict[int, Finding] = {}  # id of the group's first finding -> the merged one
    dropped: set[int] = set()
    for group in groups.values():
        if len(group) < 2:
            continue
        # the cause before its symptom, among the pieces about the time that makes the line as severe as it is (a
        # named cause, tier < 0, at any): a low python_overhead of another operator's statement, 0.01% at stake,
        # led a line whose hot_operator was medium in the runs it was found
        top = min(SEVERITY_RANK.get(f.severity, 3) for f in group)
        severe = [f for f in group if SEVERITY_RANK.get(f.severity, 3) == top]
        candidates = [f for f in group if SYMPTOM_TIER.get(f.kind, 0) < 0 or any(_same_time(f, g) for g in severe)]
        # a piece `low` as borderline (its number straddles the line from which it is a finding at all) does not
        # name a line its other pieces make more severe: present in the runs whose interval reached the line and
        # absent in the others, it renamed fresh_temporaries.py:22 low_efficiency in two runs of five
        # nor does an observation (what a healthy kernel costs: a low_efficiency whose output's fresh pages account
        # for it names examples/attention.py:28 "the kernel is not what is slow" where its hot_operator is medium)
        sure = [f for f in candidates if not (f.severity == "low" and f.borderline is not None
                                          and top < SEVERITY_RANK["low"]) and not observation(f)]
        # the time that leads first (_lead), then the cause before its symptom among the pieces about that time
        pool = sure or candidates
        lead = min(pool, key=_lead)
        primary = min([f for f in pool if _same_time(f, lead)], key=lambda f: (SYMPTOM_TIER.get(f.kind, 0),
                                                                              *rank_key(f)))
        # every piece flat: the primary's own (a finding without a line it holds), then the others with theirs
        also = primary.also + [p for f in group if f is not primary for p in [dataclasses.replace(f, also=[]), *f.also]]
        # pieces about the same time lend stake and severity; an observation (a healthy GEMM) has nothing to fix
        same = [f for f in group if _same_time(f, primary) and (f is primary or not observation(f))]
        best = max(same, key=stake)
        at_stake = primary.stake
        if stake(best) > stake(primary):
            at_stake = dataclasses.replace(best.stake, basis=f"{best.kind}: {best.stake.basis}")
        worst = min(same, key=lambda f: SEVERITY_RANK.get(f.severity, 3))
        severity = worst.severity if SEVERITY_RANK.get(worst.severity, 3) < SEVERITY_RANK.get(primary.severity, 3) \
            else primary.severity
        # say which piece made the line this severe
        severity_from = f"{worst.kind} ({worst.layer})" if severity != primary.severity else primary.severity_from
        merged[id(group[0])] = dataclasses.replace(primary, severity=severity, stake=at_stake, also=also,
                                                   severity_from=severity_from)
        dropped.update(id(f) for f in group)
    out = []
    for f in findings:
        if id(f) in merged:
            out.append(merged[id(f)])
        elif id(f) not in dropped:
            out.append(f)
    return out
