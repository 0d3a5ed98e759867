"""Measured trials: the user's own workload with and without one change applied from outside.

A trial runs the uninstrumented pass (the same window of steps as every
other pass, or function mode's measured calls) with the change: an
environment at launch (LD_PRELOAD and MALLOC_CONF for an allocator, glibc's
malloc thresholds) or a runner option (torch.set_flush_denormal(True)
before the script; an intra-op thread count pinned whatever the script asks
for, the one-point trial of a threads finding's recommended setting). Nothing is changed in the user's environment beyond
those passes. All sides start alike: every pass is a fresh interpreter, the
baseline's too, when a variant needs an environment at launch; otherwise all
are forked from the fork server (torch imported once).

Design (interleaved rounds): each of ROUNDS rounds runs the baseline and
every variant once, in alternating order (baseline first, then last, ...),
so drift over time hits every side alike. A side's step is the LOWER
QUARTILE of its step times, not their median: on a shared CPU a step's time
is its work plus the waits other processes cause it, and the faster quarter
of the steps keeps the work and drops most of the waits (measured in
benchmarks/trial_false_wins.py: with medians, a real 1.11x change on 2 ms
steps of a loaded 2-CPU machine was found in 26 of 40 trials, with the lower
quartile in 38 of 40, A/A false wins at most 1 of 40 either way). Per side
the step times of all its passes are pooled:
- speedup = baseline step / variant step (each the pooled lower quartile);
- its 95% interval is a seeded bootstrap (BOOTSTRAP_RESAMPLES) that
  resamples the rounds (a round's baseline and variant passes together, so
  the interleaving's pairing holds), then the steps within each pass drawn.
  Each pass is a fresh process, and what one process makes of a step (where
  the allocator's heap settles, which pages fault, a neighbour's load in its
  seconds) holds for all its steps: an interval from the steps alone showed
  only their spread within a pass. It gave 1.093-1.098x for
  examples/growing_cache.py's jemalloc, where another run of the same script
  measured 1.08x (1.003-1.094) and a third no gain; 1.059-1.09x for
  resnet_train's, whose time at stake read 5.6% at its low end there and
  1.2% and 4.3% in two runs of nine rounds (a severity flip at the 5% line);
- the noise floor is the pass-to-pass spread of the baseline itself: the
  median |log ratio| between its passes' steps (exp - 1);
- a variant **wins** (and is recommended) only when the interval lies above 1,
  the speedup exceeds the noise floor NOISE_MARGIN times over (speedup >
  (1 + floor)^2: three baseline passes estimate the floor loosely, and one
  quiet trio makes it too low), and it was faster in every round; "slower"
  mirrors that; anything else is "no gain". On benchmarks/trial_false_wins.py's
  passes (a loaded 2-CPU machine) the margin took A/A false wins from up to
  3 of 40 to at most 1 of 40, but 2 of 40 on 20 ms steps under two hogs, and
  cost at most 2 of 40 detections of a real 1.11-1.14x on 0.2 and 2 ms steps.

A change must also be worth recommending: at least MIN_EFFECT (5%) faster or slower. On this
benchmark's 12-round passes (2026-11-26, AMD EPYC, 2 CPUs) every A/A call of the 3-round rule was a
speedup of 0.979-1.014 (two forks of the same step differ by that much), and the minimum effect removed all
of them (from 2 of 40 on 0.2 ms steps under a hog) without costing a detection.

When the first ROUNDS rounds cannot tell (the verdict is "no gain", no structural truth settles it, and a
round was more than MIN_EFFECT faster: the rounds do not rule out a change worth recommending; or a win whose
interval reaches under a saving of MIN_EFFECT: they do not tell whether it is worth recommending, as
OPENBLAS_NUM_THREADS=1 on examples/numpy_beside_torch.py at 1.15x, 1.03-1.42x, where three runs of nine
rounds measured 1.15-1.30x), the trial runs to EXTENDED_ROUNDS rounds, baseline and those variants only, and
is judged on its rounds (`method` "rounds"): the median round ratio (baseline / variant, each pass's lower
quartile) beyond MIN_EFFECT, and its sign-test 95% interval (microbench.stats.sign_test_ci: at 9 rounds, 8
of them on one side) excluding 1, the rule `diagnose compare --repeat` uses.

A win the first rounds decided (`decided_win`) runs on too, for its size: a finding's severity is judged on
a won trial's interval (findings/stake.measured), and three fresh processes can agree by chance, which
nothing in those three shows. examples/conv_nchw.py's jemalloc won 1.71x (1.42-1.84x) and 1.50x
(1.46-1.53x) on three agreeing rounds (page_faults high) and 1.39x (1.10-1.54x) and 1.21x (1.13-1.29x) on
nine (medium, borderline high) in runs of the same hour: the severity followed how many rounds the trial had
run. Its speedup and interval are then its rounds' median and sign-test interval, as every trial that ran
on, and it stays a win while that median is beyond MIN_EFFECT: the decision is the first rounds', whose
false wins and power benchmarks/trial_false_wins.py measures. Asking the sign test as well cost detections
there: on a Xeon VM whose passes ran 1.5x slower now and then (a 5-10% pass-to-pass floor, 2026-11-28), a
real 1.15x was found in 28-35 of 40 trials a condition where the first rounds' rule found it in 32-36.
A win so large that no size nine rounds could plausibly give it changes its severity (`settled_win`) stops
at its first rounds: the low end of their interval, discounted by the most three agreeing rounds have
overstated a win (FEW_ROUNDS_OVERSTATED: conv_nchw's 1.71x against 1.21x), still saves HIGH_MIN_PCT of the
step, the share from which a finding is high (a script without steps, whose passes give one time each: its
slowest round). examples/allocation_churn.py's jemalloc and glibc thresholds each won 4.8-6.4x on nine rounds,
and a diagnosis of that 0.35 s script took 112-143 s (50 s stopping at three); examples/attention.py's won
2.2-2.6x, 96-105 s (38 s). Both on a 2-CPU AMD EPYC, 2026-12-02.
Where a check's changes are alternatives, one of which is applied (the doctor's allocators: `one_per_check`),
only the surest of its decided wins runs on (report/model.surest after the first rounds); the others keep their
first rounds' verdict and size, marked `led_by` it, and the finding, the launch line and the step budget take
the one that ran on. Their size would serve nothing: they are not recommended beside it. Where none of a check's
alternatives won on its first rounds and more than one could not tell, only the likeliest runs on (`likeliest`:
the highest low end of its first rounds' interval), the others led by it: both allocators answer one question (what the
fresh pages cost, kept for reuse), and the one run on answers it. A Whisper transcription loop (1.8 s steps,
a pass of 45-60 s: 2-CPU AMD EPYC, 2026-12-03) ran both allocators on from 3 rounds to 9, 27 passes and 24 of
its 27 minutes, for 1.08x and 1.08x; with one, 21 passes. The what-if layer's
changes combine, and each of its wins runs on. examples/conv_nchw.py, both allocators winning (2-CPU AMD
EPYC, 2026-12-03): the doctor took 145 s with both running on, 114 s with the surest alone (171 s and 135 s
the whole diagnosis); its finding stayed high.

A paired round cancels the machine's slow drift that widens the pooled floor: on a VM whose idle CPU comes
and goes, 20 ms steps had an 18% pass-to-pass floor, which hid a real 1.15x from the pooled rule in 28 of 40
trials. A trial with no round more than MIN_EFFECT faster costs nothing more (on the 12-round passes 0-2
variants of 40 a condition were extended); a win costs (EXTENDED_ROUNDS - ROUNDS) more rounds of the
baseline and itself. Running on only serves the questions that matter, whether to recommend the change and
how much it gains, so a slowdown is still called on the first rounds, and a change whose win would change
nothing (`may_win`: a what-if variant whose outputs differ) is not run on. Measured as a user on a BERT
training step: compile (outputs differing, 0.96x) ran on to 9 rounds with a compilation in each, 554 s where
234 s were announced.
`--trial-rounds N` (at least ROUNDS; 9 by default) bounds the run-on for a user (or a CI job) who wants a
known cost: a trial the bound kept from running on is marked `capped`, its verdict and size those of its
first rounds, and the report says so (a "no gain" stayed undecided; a win's size is from three rounds). On a
shared 2-CPU machine the run-on was what made the same e2e test take 21 s in one run and 61 s in the next.

A script without steps gives one time per pass (its whole run): then there is
no interval, and every round must agree beyond the floor (run on: the sign test alone).

Structural truths come before statistics: a change that provably changes
nothing on this workload (a NoEffect: an allocator when the steps fault in no
page, flush_denormal when no subnormal value was seen; the what-if layer adds
its own, diagnose/whatif/variants.py) is "no gain" with its reason, whatever
its timings say: on short or noisy steps an A/A pair can pass every test
above by chance, and a recommendation that cannot be true is worse than none.
"""

from __future__ import annotations

import math
import os
import random
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from diagnose.config import FIRST_TRIAL_ROUNDS, HIGH_MIN_PCT, TRIAL_ROUNDS
from diagnose.doctor.environment import BLAS_CHECK, BLAS_VARIABLE_FACT
from diagnose.doctor.workload import FAULTS_PER, SUBNORMALS_FACT
from diagnose.protocol import Overrides, PassResult
from diagnose.report.model import BaselinePass, DoctorCheck, NoEffect, Trial, surest
from microbench.stats import sign_test_ci

ROUNDS = FIRST_TRIAL_ROUNDS
# rounds for a trial the first ROUNDS cannot tell (module docstring), unless --trial-rounds says fewer;
# compare.ROUNDS_ADVISED
EXTENDED_ROUNDS = TRIAL_ROUNDS
MIN_EFFECT = 0.05  # the least change a trial calls (module docstring): a saving of 5% of the step, or a 5% loss
# ... as a speedup: 1.0526x, not 1.05x, so that a win saves at least the 5% of the step from which its finding is
# medium (findings/stake.MEDIUM_MIN_PCT): a 1.050-1.052x win was recommended with a low finding (transpose_copy's
# jemalloc at 1.052x, gallery set Z)
MIN_SPEEDUP = 1.0 / (1.0 - MIN_EFFECT)
# the most three agreeing rounds have overstated a win (module docstring, `settled_win`): examples/conv_nchw.py's
# jemalloc won 1.71x (1.42-1.84x) on three rounds, and 1.21x (1.13-1.29x) on nine in a run of the same hour
FEW_ROUNDS_OVERSTATED = 1.71 / 1.21
# the low end of a decided win's first-rounds interval from which it stops there (`settled_win`): 1.77x, a saving of
# HIGH_MIN_PCT of the step (1.25x) times FEW_ROUNDS_OVERSTATED
SETTLED_SPEEDUP = FEW_ROUNDS_OVERSTATED / (1.0 - HIGH_MIN_PCT / 100.0)
NOISE_MARGIN = 2.0  # a change must beat the baseline's pass-to-pass spread this many times over (log scale)
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
# jemalloc settings that keep freed pages for reuse (IPEX's launcher and torch.backends.xeon.run_cpu use
# these): large allocations from arenas, not fresh mmaps; dirty pages never returned. Measured 8x on a loop
# of fresh 64 MiB temporaries; jemalloc's default config gave nothing there.
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1"
# glibc: serve every allocation under 1 GB from the heap, and never trim it back to the kernel
GLIBC_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "100000000000"}
# the name of the one-point trial of a configured intra-op count (thread_count_variant): findings/threads.py reads
# it back into the undersubscription or oversubscription finding it answers
THREAD_TRIAL = "intra_op_threads"
# the checks whose changes set the threads' count: they answer an oversubscription, so they run while it lasts (`defer`)
THREAD_CHECKS = ("undersubscription", "oversubscription", "cpu_quota", BLAS_CHECK)
DEFERRED = "deferred"  # the verdict of a trial `defer` kept for after the oversubscription is fixed
INSTALL_ALLOCATORS = "apt-get install libjemalloc2 libgoogle-perftools4 (Debian/Ubuntu)"


@dataclass(frozen=True)
class Variant:
    name: str
    check: str
    change: str  # what the user would do
    env: dict[str, str] = field(default_factory=dict)
    overrides: Overrides = Overrides()  # what the child changes (protocol.Overrides)


def find_library(names: Sequence[str], dirs: Sequence[str] = LIB_DIRS) -> str | None:
    for d in dirs:
        for name in names:
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
    return None


def _launch(env: dict[str, str], command: str) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + command


def allocator_variants(command: str, dirs: Sequence[str] = LIB_DIRS,
                       every: bool = False) -> tuple[list[Variant], str | None]:
    """The allocator changes this machine can try (jemalloc, else tcmalloc, and glibc's thresholds, which need
    no install; with `every` both jemalloc and tcmalloc), and a note on what it lacks (None: nothing)."""
    out = []
    jemalloc = find_library(["libjemalloc.so.2", "libjemalloc.so"], dirs)
    if jemalloc:
        env = {"LD_PRELOAD": jemalloc, "MALLOC_CONF": JEMALLOC_CONF}
        out.append(Variant("jemalloc", "page_faults", _launch(env, command), env))
    tcmalloc = find_library(["libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so"], dirs)
    if tcmalloc and (every or not jemalloc):
        env = {"LD_PRELOAD": tcmalloc}
        out.append(Variant("tcmalloc", "page_faults", _launch(env, command), env))
    out.append(Variant("glibc_malloc_thresholds", "page_faults", _launch(GLIBC_THRESHOLDS, command),
                       dict(GLIBC_THRESHOLDS)))
    note = (f"neither jemalloc nor tcmalloc is installed here, so only glibc's thresholds were tried: "
            f"{INSTALL_ALLOCATORS}") if not (jemalloc or tcmalloc) else None
    return out, note


def flush_denormal_variant() -> Variant:
    return Variant("flush_denormal", "denormals", "torch.set_flush_denormal(True)  # once, before the model runs",
                   overrides=Overrides(flush_denormal=True))


def bind_threads_variant(command: str) -> Variant:
    env = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    return Variant("bind_threads", "topology", _launch(env, command), env)


def quota_threads_variant(command: str, quota_cpus: float) -> Variant:
    n = str(max(1, math.floor(quota_cpus)))
    env = {"OMP_NUM_THREADS": n}
    return Variant("quota_threads", "cpu_quota", _launch(env, command), env)


def blas_threads_variant(command: str, variable: str) -> Variant:
    env = {variable: "1"}
    return Variant("blas_one_thread", BLAS_CHECK, _launch(env, command), env)


def thread_count_variant(check: str, threads: int) -> Variant:
    """The one-point trial of a configured intra-op count (`check`: the threads finding it answers,
    findings/threads.configured_threads_fix): the pass pins `threads` whatever the target asks for
    (runner._pin_threads), as a thread sweep's point does."""
    return Variant(THREAD_TRIAL, check, f"torch.set_num_threads({threads})",
                   overrides=Overrides(intra_op_threads=threads))


def variants_for(checks: list[DoctorCheck], command: str, every: bool, quota_cpus: float | None = None,
                 lib_dirs: Sequence[str] = LIB_DIRS) -> tuple[list[Variant], list[str]]:
    """The trials to run: those answering a check that warned, or every one this machine can try (`every`,
    --doctor); and notes on what could not be tried."""
    warned = {c.name for c in checks if c.status == "warn"}
    variants: list[Variant] = []
    notes: list[str] = []
    if every or "page_faults" in warned:
        allocators, note = allocator_variants(command, lib_dirs, every)
        variants += allocators
        notes += [note] if note else []
    if every or "denormals" in warned:
        variants.append(flush_denormal_variant())
    if every or "topology" in warned:
        variants.append(bind_threads_variant(command))
    if "cpu_quota" in warned and quota_cpus:
        variants.append(quota_threads_variant(command, quota_cpus))
    blas = next((c for c in checks if c.name == BLAS_CHECK and c.status == "warn"), None)
    variable = next((f.value for f in blas.facts if f.name == BLAS_VARIABLE_FACT), None) if blas else None
    if variable:
        variants.append(blas_threads_variant(command, str(variable)))
    return variants, notes


def defer(variants: list[Variant], waits: float | None) -> tuple[list[Variant], list[Trial]]:
    """(the variants to run, the trials deferred): while the threads layer measures the process oversubscribed
    (`waits`: the share of runnable time its threads waited for a CPU, findings/threads.oversubscribed), only the
    changes that answer the oversubscription run (THREAD_CHECKS: a thread count, a quota's count, a second BLAS
    pool's); the others' timings would measure the scheduler rather than their change, so they wait, as
    `deferred` trials with the reason, until the oversubscription is fixed. examples/too_many_threads.py's page
    faults crossed the 5% line in one clean clone and ran nine fresh passes of 8 threads on 2 CPUs (41 s) for
    allocator timings its own finding says to measure again once the count is fixed."""
    if waits is None:
        return variants, []
    why = (f"the threads waited for a CPU {100 * waits:.0f}% of their runnable time (oversubscription), "
           "so its timings would measure the scheduler; fix the oversubscription and run again")
    later = [Trial(name=v.name, check=v.check, change=v.change, env=dict(v.env), verdict=DEFERRED, reason=why)
             for v in variants if v.check not in THREAD_CHECKS]
    return [v for v in variants if v.check in THREAD_CHECKS], later


def no_effect(check: str, checks: list[DoctorCheck]) -> NoEffect | None:
    """Why a change answering `check` provably changes nothing on this workload, from that check's readings
    (None: nothing known, or something to change): an allocator when the steps fault in no fresh page (what the
    allocator settings avoid), flush_denormal when the scans saw no subnormal value."""
    found = next((c for c in checks if c.name == check), None)
    if found is None or found.status == "skipped":
        return None
    facts = {f.name: f for f in found.facts}
    if check == "page_faults":
        per = next((f for name, f in facts.items() if name.startswith(FAULTS_PER)), None)
        if per is not None and per.value == 0:
            return NoEffect("no page faults", f"{per.name}: fewer than 1 ({per.source}); the allocator settings "
                                              "change how freed pages are kept, and no step takes a fresh page")
    if check == "denormals":
        seen = facts.get(SUBNORMALS_FACT)
        scanned = facts.get("values scanned")
        if seen is not None and seen.value == 0:
            return NoEffect("no subnormal values", f"0 subnormal values among {scanned.value if scanned else '?'} "
                                                   "scanned in the weights and inputs; flushing changes only "
                                                   "arithmetic on subnormals")
    return None


# ---------------------------------------------------------------- statistics


def step_of(times: list[float]) -> float:
    """A side's step from its step times: their lower quartile (module docstring: the work, without most of
    the waits a shared CPU adds)."""
    return statistics.quantiles(times, n=4, method="inclusive")[0] if len(times) > 1 else times[0]


def _pooled(passes: list[list[float]]) -> float:
    return step_of([x for p in passes for x in p])


def bootstrap_speedup(base: list[list[float]], variant: list[list[float]], seed: int = 0,
                      resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """Percentile interval of step_of(base)/step_of(variant), the passes paired by round (base[i] and variant[i]
    ran in round i): rounds drawn with replacement, then steps within each pass drawn (module docstring)."""
    if len(base) != len(variant) or any(len(p) < 2 for p in base + variant):
        return None
    rng = random.Random(seed)

    def resample(passes: list[list[float]], rounds: list[int]) -> float:
        return step_of([x for i in rounds for x in rng.choices(passes[i], k=len(passes[i]))])

    def ratio() -> float:
        rounds = rng.choices(range(len(base)), k=len(base))
        return resample(base, rounds) / resample(variant, rounds)

    ratios = sorted(ratio() for _ in range(resamples))
    alpha = 1.0 - CONFIDENCE
    lo = ratios[math.floor(alpha / 2 * (resamples - 1))]
    hi = ratios[math.ceil((1 - alpha / 2) * (resamples - 1))]
    return lo, hi


def noise_floor(base: list[list[float]]) -> float:
    """Pass-to-pass spread of the baseline: exp(median |log ratio| between its passes' steps) - 1."""
    meds = [step_of(p) for p in base if p]
    logs = [abs(math.log(a / b)) for i, a in enumerate(meds) for b in meds[i + 1:] if a > 0 and b > 0]
    return math.expm1(statistics.median(logs)) if logs else 0.0


def judge(trial: Trial, base: list[list[float]], variant: list[list[float]], per_round: list[float],
          unchanged: NoEffect | None = None, extended: bool = False, won_first: bool = False) -> Trial:
    """Fill the trial's numbers and verdict from the baseline's and the variant's passes (module docstring); a
    change that provably changes nothing (`unchanged`) is "no gain" before any statistic. `extended` (run on
    past the first rounds): judged on its rounds (`by_rounds`)."""
    trial.baseline_step_s = round(_pooled(base), 6)
    trial.variant_step_s = round(_pooled(variant), 6)
    trial.speedup = round(trial.baseline_step_s / trial.variant_step_s, 3) if trial.variant_step_s else None
    floor = noise_floor(base)
    trial.noise_floor_pct = round(100.0 * floor, 1)
    if extended:
        by_rounds(trial, per_round, won_first)
    else:
        ci = bootstrap_speedup(base, variant)
        if ci:
            trial.ci_low, trial.ci_high = round(ci[0], 3), round(ci[1], 3)
        s = trial.speedup or 1.0
        beyond = max((1.0 + floor) ** NOISE_MARGIN, MIN_SPEEDUP)  # the smallest ratio that is not the noise
        faster = all(r > 1.0 for r in per_round) and s > beyond and (ci is None or ci[0] > 1.0)
        slower = all(r < 1.0 for r in per_round) and 1.0 / s > beyond and (ci is None or ci[1] < 1.0)
        trial.verdict = "win" if faster else "slower" if slower else "no gain"
    if unchanged is not None:
        trial.verdict, trial.no_effect = "no gain", unchanged
    return trial


def by_rounds(trial: Trial, per_round: list[float], won_first: bool = False) -> Trial:
    """An extended trial's verdict from its round ratios (module docstring): the median beyond MIN_EFFECT, its
    sign-test 95% interval excluding 1; the speedup and interval shown are those. `won_first`: the first rounds
    called it a win worth recommending (`decided_win`), and it ran on for its size: it stays a win while its
    median round is beyond MIN_EFFECT, whatever the sign test says."""
    logs = [math.log(r) for r in per_round if r > 0]
    trial.method = "rounds"
    median = math.exp(statistics.median(logs))
    trial.speedup = round(median, 3)
    ci = sign_test_ci(logs, CONFIDENCE)
    trial.ci_low, trial.ci_high = (round(math.exp(ci[0]), 3), round(math.exp(ci[1]), 3)) if ci else (None, None)
    faster = median > MIN_SPEEDUP and (won_first or (ci is not None and ci[0] > 0))
    slower = ci is not None and ci[1] < 0 and 1.0 / median > MIN_SPEEDUP
    trial.verdict = "win" if faster else "slower" if slower else "no gain"
    return trial


def decided_win(trial: Trial) -> bool:
    """A win the first rounds decided is worth recommending: its 95% interval's low end a saving of MIN_EFFECT or
    more (or no interval: a script without steps, every round faster)."""
    return trial.verdict == "win" and (trial.ci_low is None or trial.ci_low >= MIN_SPEEDUP)


def settled_win(trial: Trial, per_round: list[float]) -> bool:
    """A decided win whose first rounds settle its size (module docstring): the low end of their interval and
    their slowest round (a script without steps has no interval, only its rounds) are at least SETTLED_SPEEDUP,
    so discounted by FEW_ROUNDS_OVERSTATED it still saves HIGH_MIN_PCT of the step, and no size more rounds
    could plausibly measure would change its finding's severity."""
    low = min([*per_round, *([trial.ci_low] if trial.ci_low is not None else [])], default=0.0)
    return decided_win(trial) and low >= SETTLED_SPEEDUP


def runs_on(trial: Trial, per_round: list[float]) -> bool:
    """After the first rounds, whether a trial runs on to more rounds (module docstring): a win, for its size (a
    finding's severity is judged on it, and three rounds can agree by chance) unless its first rounds settle it
    (`settled_win`), or, when its interval reaches under a saving of MIN_EFFECT, for its verdict; or a "no gain"
    without a structural reason and with a round more than MIN_EFFECT faster (the rounds do not rule out a
    change worth recommending)."""
    if trial.no_effect is not None:
        return False
    if trial.verdict == "win":
        return not settled_win(trial, per_round)
    return trial.verdict == "no gain" and any(r > MIN_SPEEDUP for r in per_round)


def likeliest(undecided: list[Trial]) -> Trial:
    """Of a check's alternatives its first rounds could not decide, the one to run on (`run_trials`
    `one_per_check`): as `surest` takes a win, the highest low end of its interval, then the larger speedup.
    examples/transpose_copy.py (2-CPU AMD EPYC, 2026-12-03): jemalloc's rounds 1.04, 1.08 and 2.95x (1.04-2.80x)
    beside glibc's thresholds' 1.09, 1.12 and 2.57x (0.99-1.25x); taken by the median round, glibc's ran on and
    could not tell, where jemalloc had been faster in every round."""
    return max(undecided, key=lambda t: (t.ci_low if t.ci_low is not None else 0.0, t.speedup or 0.0))


def could_win(trial: Trial) -> bool:
    """A "no gain" that does not show the change gains nothing: no structural reason, and its 95% interval still
    reaches a gain worth recommending (above MIN_SPEEDUP). A finding that carries the trial keeps its own
    estimate then, rather than a stake of 0: examples/numpy_beside_torch.py's OPENBLAS_NUM_THREADS=1 measured
    1.30x (1.21-1.40) and 1.30x (1.09-1.41) in two runs of nine rounds, and 1.15x (0.95-1.40), "no gain", in a
    third: the sign test cannot tell there, which is not a measured absence of gain."""
    return (trial.verdict == "no gain" and trial.no_effect is None and trial.ci_high is not None
            and trial.ci_high > MIN_SPEEDUP)


def ruled_out(trial: Trial) -> bool:
    """The trial measured the change and ruled out a gain worth making: slower, or a "no gain" that could_win does
    not excuse. What settles a finding at low (threads) or leaves a check without one (doctor)."""
    return trial.verdict in ("no gain", "slower") and not could_win(trial)


# ---------------------------------------------------------------- running

# (pass name, environment at launch, overrides) -> the pass's step (or call) times, or why it measured none
RunWorkload = Callable[[str, dict[str, str], Overrides], "list[float] | str"]
Rerun = Callable[[str, dict[str, str], Overrides], "PassResult | str"]


@dataclass
class Counted:
    """`rerun` (DerivedContext.rerun) as run_trials' `run`: each pass announced (index of `total`; `more` adds
    an extended trial's passes), and what it measured as step times."""

    rerun: Rerun
    total: int
    on_trial: Callable[..., None] | None
    kind: str = "doctor"
    done: int = 0
    baselines: list[BaselinePass] = field(default_factory=list)  # what each baseline pass measured

    def __call__(self, name: str, env: dict[str, str], overrides: Overrides) -> list[float] | str:
        self.done += 1
        if self.on_trial:
            self.on_trial(self.done, self.total, self.kind, f"trial {name}")
        out = self.rerun(name, env, overrides)
        if isinstance(out, str):
            return out
        if name.endswith(f"-{BASELINE}") and out.iteration_s:
            steps = out.iteration_s
            self.baselines.append(BaselinePass(name, len(steps), round(statistics.median(steps), 6), out.minor_faults))
        return out.measured_s or "the pass measured no step"

    def more(self, passes: int) -> None:
        self.total += passes


BASELINE = "baseline"  # the unchanged side's name in its passes' names (`pass_name`)


def pass_name(round_index: int, side: str) -> str:
    """The name `run` gets for one side's pass in one round ("trial-0-baseline", "trial-2-jemalloc")."""
    return f"trial-{round_index}-{side}"


def run_trials(variants: list[Variant], run: RunWorkload, rounds: int = ROUNDS,
               baseline: Overrides = Overrides(),
               unchanged: Callable[[Variant], NoEffect | None] | None = None,
               extended: int = EXTENDED_ROUNDS, more: Callable[[int], None] | None = None,
               may_win: Callable[[Variant], bool] | None = None, one_per_check: bool = False) -> list[Trial]:
    """Interleaved rounds of the baseline and every variant; `run(name, env, options)` gives a pass's step
    times, or a one-line reason when the pass failed (that variant is then `failed`, the others go on).
    `baseline`: the unchanged side's overrides (the what-if passes' seed and output capture). `unchanged`:
    asked after the first rounds, why a variant provably changed nothing (what its passes or the report say).
    A variant the first `rounds` cannot decide, or call a win, runs on to `extended` rounds with the baseline
    (module docstring); `more(n)` hears of those n extra passes before they run; `may_win(v)`, asked first,
    False: a win would change nothing done with it (the what-if layer: its outputs do not match), so it is not
    run on. `one_per_check`: the variants of one check are alternatives, one of which is applied (the doctor's
    allocators exclude each other), so only one per check runs on: of the wins the first rounds decided, the
    surest (for its size); without one, of those they could not tell, the likeliest (highest interval low end). The
    others keep their first rounds' verdict and size, `led_by` naming it (module docstring)."""
    trials = {v.name: Trial(name=v.name, check=v.check, change=v.change, env=dict(v.env)) for v in variants}
    base: dict[int, list[float]] = {}  # round -> the baseline's pass
    passes: dict[str, dict[int, list[float]]] = {v.name: {} for v in variants}
    # every side starts alike: all in fresh interpreters when one needs an environment at launch, else all
    # forked from the fork server (diagnose/forkserver.py)
    fresh = any(v.env for v in variants)
    no_effects: dict[str, NoEffect | None] = {}

    def play(r: int, playing: list[Variant]) -> None:
        sides: list[Variant | None] = [None, *playing]
        got: dict[str, list[float]] = {}
        for v in (sides if r % 2 == 0 else sides[::-1]):
            if v is not None and trials[v.name].verdict == "failed":
                continue
            name = BASELINE if v is None else v.name
            env = {"DIAGNOSE_TRIAL": name, **(v.env if v else {})} if fresh else {}
            out = run(pass_name(r, name), env, v.overrides if v else baseline)
            if isinstance(out, str) or not out:
                if v is None:  # without the baseline this round compares nothing
                    return
                trials[v.name].verdict, trials[v.name].reason = "failed", out or "the pass measured no step"
                continue
            got[name] = out
        if BASELINE in got:
            base[r] = got[BASELINE]
            for v in playing:
                if v.name in got:
                    passes[v.name][r] = got[v.name]

    def ratios(v: Variant) -> list[float]:  # baseline / variant, round by round
        return [step_of(base[r]) / step_of(passes[v.name][r]) for r in sorted(passes[v.name])]

    def decide(v: Variant, won_first: bool = False) -> Trial:
        t = trials[v.name]
        mine = passes[v.name]
        per_round = ratios(v)
        t.rounds = len(mine)
        t.round_ratios = [round(r, 4) for r in per_round]  # shown; judged on the unrounded ones
        if t.verdict != "failed" and not mine:
            t.verdict, t.reason = "failed", "no round measured both the baseline and this change"
        if t.verdict == "failed":
            return t
        if v.name not in no_effects:
            no_effects[v.name] = unchanged(v) if unchanged else None
        return judge(t, [base[r] for r in sorted(mine)], [mine[r] for r in sorted(mine)], per_round,
                     no_effects[v.name], extended=max(mine) >= rounds, won_first=won_first)

    for r in range(rounds):
        play(r, variants)
    for v in variants:
        decide(v)
    pending = [v for v in variants if runs_on(trials[v.name], ratios(v)) and (may_win is None or may_win(v))]
    if pending and extended <= rounds:  # --trial-rounds keeps them at their first rounds: said, not hidden
        for v in pending:
            trials[v.name].capped = True
    elif pending:
        won = {v.name for v in pending if decided_win(trials[v.name])}  # they run on for their size
        if one_per_check:  # one alternative of a check runs on: its surest decided win, else its likeliest
            for check in dict.fromkeys(trials[v.name].check for v in pending):
                rivals = [v for v in pending if trials[v.name].check == check]
                wins = [trials[v.name] for v in rivals if v.name in won]
                lead = surest(wins) or likeliest([trials[v.name] for v in rivals])
                for v in rivals:
                    if trials[v.name] is not lead:
                        trials[v.name].led_by = lead.name
            pending = [v for v in pending if trials[v.name].led_by is None]
        if more:
            more((extended - rounds) * (len(pending) + 1))
        for r in range(rounds, extended):
            play(r, pending)
        for v in pending:
            decide(v, won_first=v.name in won)
    return list(trials.values())


def launch_line(trials: list[Trial], command: str) -> str | None:
    """The launch line with the surest winning environment change per check (report/model.surest; allocators
    exclude each other)."""
    env: dict[str, str] = {}
    for check in dict.fromkeys(t.check for t in trials):
        best = surest([t for t in trials if t.check == check and t.env])
        if best is not None:
            env.update(best.env)
    return _launch(env, command) if env else None
