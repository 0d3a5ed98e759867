"""Rule on the environment doctor (report.doctor, diagnose/doctor/): environment.

One finding per check that has something to recommend, kind = the check's
name (page_faults, denormals, openmp_runtimes, blas_threads, cpu_quota,
topology, low_precision):
- a check whose suggestion was tried (diagnose/doctor/trials.py) gets a
  finding only when a trial won: the time at stake is what the best winning
  trial measured, 1 - 1/speedup of the step, with the interval its 95%
  interval gives (stake.measured: severity is judged on it), and the
  suggestion is that trial's exact change. A trial that
  won without its check warning (--doctor runs them all) is reported too:
  it was measured.
- a warning whose suggestion cannot be tried from outside (two OpenMP
  runtimes, low precision without hardware) gets a finding with the
  check's own estimate of its stake (none: `low`), marked not measured.
  (A separate BLAS pool is tried: its thread variable set to 1.)
- a warning whose trials could not tell (trials.could_win: "no gain" with
  an interval that still reaches a gain worth having) gets a finding with the
  check's own estimate, as an untried warning does, at most the largest
  saving their intervals reach and judged on those intervals (stake.unsure_stake:
  mostly `low`, borderline, where a gain of 0 is inside them, as a win's
  stake is judged on its interval), and the title gives their numbers:
  examples/resnet_train.py's page faults (12-15% of the step by the check)
  measured jemalloc 1.36x (1.15-1.59x) in one run, 1.06x (0.84-1.21x) and
  1.21x (0.94-1.35x) in two others of nine rounds each: a finding in one run
  and none in the other two, for one workload.
- a warning whose trials were deferred (trials.defer: the threads layer
  measured the process oversubscribed, and timings would measure the
  scheduler) gets a finding with the check's estimate as an untried
  warning does, but `low` (stake.settle raises it to medium only from a
  fifth of the step): an unmeasured estimate does not make a medium finding
  where a trial would have measured it, and the oversubscription finding's
  fix comes first.
- a warning whose trials all ruled out a gain (no gain with a tight interval,
  or slower) gets no finding: the doctor section lists it as tried, with no
  gain. One alternative that ruled a gain out beside another that could not
  tell settles nothing (`_unsure`): the finding stands on the estimate, the
  title listing both. Beside one that ran its nine rounds, one that stayed at
  its first three (none of them 5% faster) is listed too, not judged on: the
  nine answer the check, on their point.
- the thread-count trial (check undersubscription or oversubscription) gets
  none here: it measures the threads finding's fix, and that finding carries
  it (findings/threads.py). So do blas_threads and its trial when the threads
  layer measured that one process oversubscribed (threads.blas_cause): the
  second pool is the oversubscription's cause, and one cause is one finding
  (examples/numpy_beside_torch.py listed "numpy's openblas did work beside
  torch's pool" and "one process runs 3 busy intra-op threads ...
  torch.set_num_threads(2)", advice for a count already at 2).
"""

from __future__ import annotations

from diagnose.doctor.environment import BLAS_CHECK
from diagnose.doctor.trials import DEFERRED, MIN_EFFECT, could_win
from diagnose.findings.stake import measured, unsure_stake
from diagnose.findings.threads import blas_cause
from diagnose.report.model import DoctorCheck, Finding, Report, Stake, Trial

THREAD_FINDINGS = ("undersubscription", "oversubscription")  # kinds whose trials findings/threads.py reads


def _facts(check: DoctorCheck | None) -> dict:
    return {f.name: f.value for f in check.facts} if check else {}


def _unsure(tried: list[Trial]) -> tuple[list[Trial], list[Trial]]:
    """(the trials that could not tell, the others measured) when the check stands on its estimate, ([], []) when
    the trials settled it. A check is settled only when none of its alternatives could still win
    (trials.could_win): each ruled a gain out (trials.ruled_out: no gain with a tight interval, or slower). One
    alternative measured slower answers for itself, not for another that could not tell: examples/growing_cache.py
    (2-CPU AMD EPYC, 2026-12-03), glibc's thresholds 0.83x (0.79-0.91x) in three rounds beside jemalloc's 0.98x
    (0.94-1.07x) in nine, and in another run jemalloc 0.91x (0.73-0.99x) beside glibc's 1.08x (0.72-1.24x): the
    three rounds took the finding away in two runs of five. An alternative another change
    of its check led (`led_by`: that one ran on, it stayed at its first rounds) decides nothing while one that ran
    on was measured: the check's question is answered by the longer trial; it is listed with what it measured.
    So is one that stayed at its first rounds because none of them was MIN_EFFECT faster (trials.runs_on) beside
    one that ran its rounds: the stake of trials that all ran their rounds is judged on its point between medium and
    high (stake.on_point), and three rounds beside nine put it on its low end. examples/resnet_train.py (2-CPU
    AMD EPYC with AVX-512, 2026-12-05, gallery set AA): jemalloc 1.01x (0.94-1.13x) in three rounds beside glibc's
    thresholds 1.10x (0.91-1.16x) in nine read the check's 9.6% at its low end, 0: low, where the four runs beside
    it were medium. (Since 2026-12-06 both read low, borderline medium: an interval reaching under 5% is low
    whatever its point, stake.settle; the nine rounds still answer the title.)"""
    measured_ = [t for t in tried if t.verdict in ("no gain", "slower")]
    judged = [t for t in measured_ if t.led_by is None] or measured_
    if not any(could_win(t) for t in judged):
        return [], []
    unsure = [t for t in judged if could_win(t)]
    unsure = [t for t in unsure if t.method == "rounds"] or unsure  # the longer trials answer the check
    return unsure, [t for t in measured_ if t not in unsure]


def _what(trial: Trial) -> str:
    """What a trial that is not among a standing check's could-not-tells measured, for its title."""
    if trial.verdict == "slower":
        return "slower"
    if not could_win(trial):
        return "no gain"
    if trial.led_by:
        return f"undecided, {trial.led_by} ran on"
    return f"undecided in {trial.rounds} rounds, none {100 * MIN_EFFECT:g}% faster"


def _told(trials: list[Trial]) -> str:
    return ", ".join(f"{t.name} {t.speedup:.2f}x ({t.ci_low:.2f}-{t.ci_high:.2f}x, {t.rounds} rounds)" for t in trials)


def environment(report: Report) -> list[Finding]:
    doctor = report.doctor
    if doctor is None:
        return []
    checks = {c.name: c for c in doctor.checks}
    out = []
    # the thread-count trial answers a threads finding, which reads it (findings/threads.py)
    names = list(dict.fromkeys([c.name for c in doctor.checks] + [t.check for t in doctor.trials
                                                                 if t.check not in THREAD_FINDINGS]))
    if blas_cause(report) is not None:  # the oversubscription finding carries it (module docstring)
        names.remove(BLAS_CHECK)
    for name in names:
        check = checks.get(name)
        tried = [t for t in doctor.trials if t.check == name and t.verdict != DEFERRED]
        deferred = [t for t in doctor.trials if t.check == name and t.verdict == DEFERRED]
        best = doctor.best_win(name)
        unsure, others = _unsure(tried)  # [] when nothing was tried
        if best is not None:
            interval = f" (95% interval {best.ci_low:.2f}-{best.ci_high:.2f}x)" if best.ci_low is not None else ""
            lead = f"{check.summary.rstrip('.')}: " if check and check.status == "warn" else ""
            title = f"{lead}measured {best.speedup:.2f}x faster per step with {best.name}{interval}"
            evidence = {
                "check": name, "facts": _facts(check),
                "trials": [{"name": t.name, "speedup": t.speedup, "ci_low": t.ci_low, "ci_high": t.ci_high,
                            "noise_floor_pct": t.noise_floor_pct, "verdict": t.verdict, "rounds": t.rounds,
                            "method": t.method}
                           for t in tried],
            }
            stake = measured(best, f"measured: 1 - 1/speedup of the step with {best.name}, "
                                   f"{best.rounds} interleaved rounds on your own steps")
            suggestion = f"{best.change}" + (f"  ({check.suggestion})" if check and check.suggestion else "")
            out.append(Finding(kind=name, severity="high", layer="doctor", title=title[:1].upper() + title[1:],
                               op=None, location=None, evidence=evidence, suggestion=suggestion, stake=stake))
        elif check is not None and check.status == "warn" and (not tried or unsure):
            evidence = {"check": name, "facts": _facts(check), "measured": False}
            pct, title = check.at_stake_pct, check.summary.rstrip(".")
            why = "not measured: the change cannot be tried from outside the script"
            if tried:
                told = _told(unsure)
                why = f"the trials could not tell: {told}"
                title += f": tried, {told}, which neither shows a gain nor rules one out"
                title += "".join(f"; {_told([t])} {_what(t)}" for t in others)
                evidence["trials"] = [{"name": t.name, "speedup": t.speedup, "ci_low": t.ci_low,
                                       "ci_high": t.ci_high, "verdict": t.verdict, "rounds": t.rounds,
                                       "method": t.method, "could_win": t in unsure} for t in unsure + others]
            later = bool(deferred) and not tried  # its trials wait for the oversubscription's fix
            if later:
                why = f"not measured: its trials were {DEFERRED}, {deferred[0].reason}"
                title += f": not measured, its trials {DEFERRED} while the threads wait for CPUs"
                evidence["deferred"] = [t.name for t in deferred]
            stake = unsure_stake(Stake(pct=pct, basis=f"the check's estimate ({why})" if pct is not None
                                       else f"unknown: {why}"), unsure)
            out.append(Finding(kind=name, severity="low" if pct is None or later else "high", layer="doctor",
                               title=title, op=None, location=None, evidence=evidence,
                               suggestion=check.suggestion or "", stake=stake))
    return out
