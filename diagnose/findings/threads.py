"""Rules on the threads layer: oversubscription, undersubscription, external_contention.

They read only `report.threads` (layers/threads/analysis.py), `report.machine`,
`report.run` and the doctor's thread-count trial (`report.doctor.trials`), so
they re-run on a loaded report.json. Nothing is raised
for a recording shorter than MIN_DURATION_S or without its measures.

Thresholds (2-CPU measurements, docs/measurements.md: healthy runs had a run-queue
wait share <= 0.016, oversubscribed ones >= 0.33; 0.2 separates them):
- oversubscription: the threads' own wait share >= 0.2 (runqueue_wait_share
  less the part other processes' CPUs explain, others_cpus / mean_runnable:
  `own_wait_share`) and mean_runnable > usable
  CPUs, or the compute processes' busy threads outnumber the usable CPUs
  while the machine's other processes are too few to be the cause
  (external_contention's line): a pool that wakes together queues in
  bursts a time average can hide (`_pools_exceed`). `high` at a wait share >= 0.33, else `medium`, judged on the share's
  interval (report/borderline.py, the least run-to-run spread): a share near
  a line takes the milder severity, borderline. The cause comes from
  the process/pool breakdown, in this order: DataLoader workers doing compute
  beside a main process ("dataloader_workers"), several compute processes
  ("several_processes"), one process beside which the doctor's blas_threads
  check saw a second BLAS pool do work with its thread variable unset
  ("blas_pool": the finding carries that check's suggestion and its
  blas_one_thread trial, and findings/doctor.py raises no blas_threads
  finding beside it), else one process whose pools hold more active
  threads than usable CPUs ("one_process"). The suggestion gives exact
  values: fair share = max(1, usable // compute processes); beside n
  workers the main process gets max(1, usable - n). A measured sweep
  recommendation (threads.sweep) is quoted when present; when the sweep
  measured less than SWEEP_NEGLIGIBLE_PCT throughput to gain over the
  configured setting the severity drops to `low` (the queueing is real, its
  cost here is not). For one process, `location` is the target's own line
  that asked for more threads than usable CPUs (threads.thread_calls,
  recorded by the runner: its last set_num_threads, else OMP_NUM_THREADS /
  MKL_NUM_THREADS assigned in code). When the compute processes are torchrun
  ranks (report.distributed, matched by pid), the split is usable // ranks on
  the node, given per rank, and `location` is the rank's own set_num_threads
  call that asked for more than that. Beside DataLoader workers, `location`
  is the DataLoader built with them.
- external_contention: others_cpus (machine busy minus the tree and the
  sampler) >= max(0.5, 0.25 x usable) while the tree's wait share >= 0.1:
  `high` at >= 0.33, `medium` at >= 0.2, else `low`. Raised whether or not
  the tree also oversubscribes; when it does not (mean_runnable <= usable)
  the title says the waiting is not the workload's doing.
- undersubscription: CPU-bound (busy_share >= 0.8: at least one CPU busy
  80% of the time), idle usable CPUs = usable - cpu_used >= 0.75, the rest of
  the machine leaves them idle (usable - machine_busy_cpus >= 0.75, checked
  when /proc/stat's CPUs are the usable ones), and no
  queueing (wait share < 0.2). `medium` when the intra-op setting is below
  the usable CPUs (raise it) and at least half the CPUs sit idle, else
  `low` (the work itself is serial: Python, small ops), then marked an
  observation (`observation`, see stake.py): the python and
  operators findings name the serial work's cause. With the setting below
  the usable CPUs, `location` is the target's line that set it (as above).

Measured fix (`configured_threads_fix`): when undersubscription (setting
below the usable CPUs) or one process's oversubscription (setting above
them) is raised, the doctor layer tries torch.set_num_threads(usable CPUs)
on the steps (doctor/trials.thread_count_variant, THREAD_TRIAL). The finding
reads that trial back (a "blas_pool" oversubscription its blas_one_thread
trial): a win makes its stake the measured 1 - 1/speedup of
the step (no longer an upper bound, and before the sweep's figure); no gain
or slower makes its stake 0 and its severity `low`, saying the fix was not
confirmed here, unless the trial could not tell (trials.could_win: "no
gain" whose interval still reaches a gain worth having), which keeps the
estimate and says so; a failed trial leaves the estimate above. The trial follows
the doctor's statistics (lower-quartile step, NOISE_MARGIN, 95% interval).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from diagnose.doctor.environment import BLAS_CHECK
from diagnose.doctor.trials import THREAD_TRIAL, could_win, ruled_out
from diagnose.findings.stake import UPPER_BOUND, measured, unsure_stake
from diagnose.report import borderline
from diagnose.report.model import (
    BusyThread,
    DoctorCheck,
    Finding,
    PythonThread,
    Report,
    Stake,
    ThreadCall,
    ThreadProcess,
    Threads,
    Trial,
    saving_pct,
)

WAIT_SHARE_MEDIUM = 0.2
WAIT_SHARE_HIGH = 0.33
EXTERNAL_WAIT_SHARE_LOW = 0.1
EXTERNAL_MIN_OTHERS_CPUS = 0.5
EXTERNAL_MIN_OTHERS_SHARE = 0.25  # of the usable CPUs
UNDER_MIN_BUSY_SHARE = 0.8
UNDER_MIN_IDLE_CPUS = 0.75
UNDER_MEDIUM_IDLE_SHARE = 0.5
MIN_DURATION_S = 0.5
SWEEP_NEGLIGIBLE_PCT = 5.0  # a sweep that measured less to gain makes oversubscription `low`
PROCESSES_IN_EVIDENCE = 6


def _measured(t: Threads | None) -> bool:
    return t is not None and t.mean_runnable is not None and t.runqueue_wait_share is not None \
        and (t.duration_s or 0) >= MIN_DURATION_S and t.usable_cpus > 0


def _usable(report: Report, t: Threads) -> int:
    return int(t.usable_cpus or report.machine.usable_cpus or 1)


def _compute_processes(t: Threads) -> list[ThreadProcess]:
    """Processes that did compute (the analysis marks them; helpers and idle parents do not count)."""
    return [p for p in t.processes if p.compute]


def _active(p: ThreadProcess) -> int:
    return sum(p.active_threads.values())


def _process_evidence(procs: list[ThreadProcess]) -> list[dict[str, Any]]:
    return [{"pid": p.pid, "role": p.role, "name": p.name, "threads": p.threads,
             "active_threads": p.active_threads, "mean_runnable": p.mean_runnable,
             "cpu_used": p.cpu_used, "wait_share": p.wait_share}
            for p in procs[:PROCESSES_IN_EVIDENCE]]


def _thread_names(pairs: list[tuple[PythonThread, BusyThread]], most: int = 2) -> str:
    """'producer(), started at train.py:27, 0.93 CPUs; ...' for the busiest `most` of the target's Python threads."""
    names = []
    for p, b in pairs[:most]:
        what = f"{p.target}()" if p.target else p.name
        names.append(what + (f", started at {p.started_at}" if p.started_at else "")
                     + (f", {b.cpu_used:.2f} CPUs" if b.cpu_used is not None else ""))
    return "; ".join(names) + (f"; {len(pairs) - most} more" if len(pairs) > most else "")


def _sweep_note(t: Threads) -> str:
    rec = t.sweep.recommendation if t.sweep else None
    if not rec or not rec.code:
        return " `diagnose threads --sweep` measures the best setting."
    return f" Measured by the thread sweep: {rec.code} ({rec.env}) is within 5% of the best throughput."


THREAD_COUNT_CALLS = ("set_num_threads", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what sets the intra-op count


def cause_call(t: Threads, kinds: tuple[str, ...], wrong) -> ThreadCall | None:
    """The target's last line among `kinds` (ThreadCall.call) whose count `wrong(count)` holds, with a location;
    torch.set_num_threads wins over a variable (it overrides what the variable set at import)."""
    calls = [c for c in t.thread_calls if c.call in kinds and c.location and wrong(c.threads)]
    direct = [c for c in calls if c.call == "set_num_threads"]
    return (direct or calls)[-1] if calls else None


def _python_cpus(t: Threads, pid: int | None = None) -> float:
    """CPUs the target's own busy Python threads used on average (Threads.busy_python)."""
    return sum(b.cpu_used or 0.0 for _, b in t.busy_python(pid))


def threads_left(report: Report, t: Threads, pid: int | None = None) -> int:
    """Intra-op threads that fit beside the target's own busy Python threads: the usable CPUs less the CPUs those
    threads used, rounded (a producer thread busy 0.9 of a CPU takes one; a logger at 0.02 none), at least 1."""
    return max(1, _usable(report, t) - int(_python_cpus(t, pid) + 0.5))


def configured_threads_fix(report: Report) -> tuple[str, int] | None:
    """(finding kind, intra-op threads to try) when undersubscription or oversubscription is raised and its
    cause is the intra-op count the target configured: below the usable CPUs while they sit idle, or above what
    fits in one process (the usable CPUs less those its own busy Python threads use, threads_left). The doctor's
    one-point trial measures that setting; None: no such finding or cause."""
    t = report.threads
    intra = report.machine.intra_op_threads
    if t is None or intra is None:
        return None
    usable = _usable(report, t)
    if undersubscribed(report) and intra < usable:
        return "undersubscription", usable
    if oversubscribed(report) is not None and len(_compute_processes(t)) <= 1:
        left = threads_left(report, t)
        if intra > left:
            return "oversubscription", left
    return None


def thread_trial(report: Report, kind: str) -> Trial | None:
    """The doctor's trial of the thread count `kind`'s finding recommends, None when none ran."""
    trials = report.doctor.trials if report.doctor else []
    return next((x for x in trials if x.check == kind and x.name == THREAD_TRIAL), None)


def blas_cause(report: Report) -> DoctorCheck | None:
    """The doctor's blas_threads check when it names the cause of one process's oversubscription: it warned (a
    BLAS besides torch's, numpy's OpenBLAS, ran its own pool beside torch's with its thread variable unset) and
    the threads layer measured one compute process oversubscribed. That finding then carries the check and its
    trial (findings/doctor.py leaves both to it): one cause, one finding."""
    t = report.threads
    if oversubscribed(report) is None or t is None or len(_compute_processes(t)) > 1 or report.doctor is None:
        return None
    return next((c for c in report.doctor.checks if c.name == BLAS_CHECK and c.status == "warn"), None)


def _trial_evidence(trial: Trial) -> dict[str, Any]:
    return {"name": trial.name, "change": trial.change, "verdict": trial.verdict, "rounds": trial.rounds,
            "baseline_step_s": trial.baseline_step_s, "variant_step_s": trial.variant_step_s,
            "speedup": trial.speedup, "ci_low": trial.ci_low, "ci_high": trial.ci_high,
            "noise_floor_pct": trial.noise_floor_pct, "method": trial.method, "reason": trial.reason,
            "capped": trial.capped}


def _outcome(trial: Trial) -> str:
    return "made your steps slower" if trial.verdict == "slower" else "gained nothing beyond the noise on your steps"


def _measured_stake(trial: Trial) -> tuple[Stake | None, str] | None:
    """The finding's stake from its trial (a win: 1 - 1/speedup of the step; a gain ruled out: 0), and a clause
    for its title; a stake of None when the trial could not tell (trials.could_win: the finding keeps its own
    estimate); None when the trial measured nothing (failed or skipped)."""
    if trial.verdict not in ("win", "no gain", "slower") or not trial.speedup:
        return None
    interval = f", 95% interval {trial.ci_low:.2f}-{trial.ci_high:.2f}x" if trial.ci_low is not None else ""
    how = f"{trial.rounds} interleaved rounds on your own steps"
    if could_win(trial):
        return None, (f"; {trial.change} measured {trial.speedup:.2f}x per step{interval} over {trial.rounds} "
                      f"rounds, which neither shows a gain nor rules one out")
    if trial.verdict == "win":
        return (measured(trial, f"measured: 1 - 1/speedup of the step with {trial.change}, {how}{interval}"),
                f"; measured {trial.speedup:.2f}x faster per step with {trial.change}{interval}")
    said = "a slower step" if trial.verdict == "slower" else "no gain beyond the noise"
    return (Stake(pct=0.0, basis=(f"measured: {trial.change} gave {said} ({trial.speedup:.2f}x{interval}; noise "
                                  f"floor {trial.noise_floor_pct}%), {how}")),
            f"; but {trial.change} measured {said} here ({trial.speedup:.2f}x{interval})")


def _severity(share: float, medium: float, high: float, low: float | None = None) -> str | None:
    if share >= high:
        return "high"
    if share >= medium:
        return "medium"
    if low is not None and share >= low:
        return "low"
    return None


def _external_min_cpus(usable: int) -> float:
    """The CPUs the machine's other processes must use to be why the threads waited (external_contention's line)."""
    return max(EXTERNAL_MIN_OTHERS_CPUS, EXTERNAL_MIN_OTHERS_SHARE * usable)


def _pools_exceed(report: Report, t: Threads) -> bool:
    """The compute processes keep more threads busy than the usable CPUs, and the others on the machine are too
    few to be why the threads waited (external_contention's line): a pool that wakes together and waits for its
    slowest thread queues for the CPUs in bursts, which a time average can put under the CPU count
    (examples/too_many_threads.py: 8 busy threads on 2 CPUs waited 69% of their runnable time, 1.79 runnable on
    average, in one fresh-clone run; above 2 in the others)."""
    usable = _usable(report, t)
    return (float(t.others_cpus or 0.0) < _external_min_cpus(usable)
            and sum(_active(p) for p in _compute_processes(t)) > usable)


def own_wait_share(t: Threads) -> float:
    """The share of their runnable time the threads waited for a CPU their own processes held: the measured wait
    share less the part the machine's other processes explain. Those held others_cpus of the CPUs over the same
    window, and the threads' runnable time is mean_runnable CPUs' worth, so others_cpus / mean_runnable of it
    waited for the others' CPUs (external_contention's time, not the pools'). examples/numpy_beside_torch.py's
    two pools on 2 CPUs (2.85-2.97 runnable) waited 33.0-33.9% in three runs with nothing else on the machine,
    and 40.6% and 44.4% in two where other processes held 0.23 and 0.39 CPUs: 30.7-33.9% of their own."""
    share = float(t.runqueue_wait_share)
    runnable = float(t.mean_runnable or 0.0)
    return max(0.0, share - float(t.others_cpus or 0.0) / runnable) if runnable > 0 else share


def oversubscribed(report: Report) -> float | None:
    """The share of runnable time the threads waited for a CPU their own processes held (own_wait_share), when it
    makes an oversubscription finding: more threads wanted a CPU than there are usable ones, on average or by the
    busy threads' count (_pools_exceed)."""
    t = report.threads
    if t is None or not _measured(t):
        return None
    share = own_wait_share(t)
    if share < WAIT_SHARE_MEDIUM:
        return None
    if float(t.mean_runnable) <= _usable(report, t) and not _pools_exceed(report, t):
        return None
    return share


def oversubscription(report: Report) -> list[Finding]:
    share = oversubscribed(report)
    if share is None:
        return []
    t = report.threads
    usable = _usable(report, t)
    runnable = float(t.mean_runnable)
    # judged on the share's interval (report/borderline.py), the least run-to-run spread: the share counts the
    # whole window's sampled thread states, not a median of steps, so the steps' spread is not its noise
    # (numpy_beside_torch's threads waited 32.0-32.9% in five runs whose steps spread up to 50%, at the 33% line)
    severity, border = borderline.grade(100 * share, borderline.RUN_NOISE_MIN,
                                        ((100 * WAIT_SHARE_HIGH, "high"), (100 * WAIT_SHARE_MEDIUM, "medium")),
                                        "share of runnable time waiting for a CPU")
    compute = _compute_processes(t)
    workers = [p for p in compute if p.role == "dataloader_worker"]
    mains = [p for p in compute if p.role != "dataloader_worker"]
    evidence: dict[str, Any] = {
        "mean_runnable": runnable, "usable_cpus": usable, "runqueue_wait_share": float(t.runqueue_wait_share),
        "own_wait_share": round(share, 4), "share_pct": round(100 * share, 1),
        "threshold_wait_share": WAIT_SHARE_HIGH if severity == "high" else WAIT_SHARE_MEDIUM,
        "cpu_used": t.cpu_used, "others_cpus": t.others_cpus,
        "method": t.method, "compute_processes": len(compute),
        "active_threads": sum(_active(p) for p in compute),
        "processes": _process_evidence(sorted(compute, key=lambda p: -(p.mean_runnable or 0))),
        "intra_op_threads": report.machine.intra_op_threads,
    }
    if workers and mains:
        n = len(workers)
        main_threads = max(1, usable - n)
        per_worker = max(_active(p) for p in workers)
        evidence.update(cause="dataloader_workers", dataloader_workers=n, threads_per_worker=per_worker,
                        main_active_threads=sum(_active(p) for p in mains),
                        recommended_main_threads=main_threads, recommended_threads_per_worker=1)
        title = (f"{runnable:.1f} threads wanted the {usable} usable CPUs: {n} DataLoader workers "
                 f"({per_worker} busy threads each) compete with the main process's thread pool; "
                 f"threads waited {100 * share:.0f}% of their runnable time")
        suggestion = (f"Give each DataLoader worker one compute thread: in worker_init_fn call "
                      f"threadpoolctl.threadpool_limits(1) for numpy/BLAS work (and torch.set_num_threads(1), "
                      f"which DataLoader already does for torch), or export OPENBLAS_NUM_THREADS=1 before numpy "
                      f"is imported; give the main process torch.set_num_threads({main_threads}) "
                      f"(usable CPUs {usable} - {n} workers). If the workers still outnumber the idle CPUs, "
                      f"use fewer workers: they only need to keep up with the training step."
                      + _sweep_note(t))
    elif len(compute) >= 2:
        n = len(compute)
        fair = max(1, usable // n)
        per_proc = max(_active(p) for p in compute)
        evidence.update(cause="several_processes", threads_per_process=per_proc, fair_share_threads=fair,
                        recommended_threads=fair)
        title = (f"{n} processes each run a pool of up to {per_proc} busy threads on {usable} usable CPUs "
                 f"({runnable:.1f} threads wanted a CPU); threads waited {100 * share:.0f}% of their runnable time")
        suggestion = (f"Split the CPUs between the processes: OMP_NUM_THREADS={fair} in each process's environment "
                      f"(or torch.set_num_threads({fair}) first thing in each), so {n} processes x {fair} "
                      f"thread{'s' if fair > 1 else ''} <= {usable} CPUs. torchrun sets OMP_NUM_THREADS=1 itself only "
                      f"when the variable is unset; multiprocessing and plain subprocesses do not."
                      + _sweep_note(t))
        pids = {p.pid for p in compute}
        ranks = [e for e in (report.distributed.ranks if report.distributed else []) if e.pid in pids]
        if ranks:  # torchrun ranks of this node (diagnose --nproc-per-node): the split is per rank
            fair = max(1, usable // len(ranks))
            omp = sorted({str(e.omp_num_threads) for e in ranks})
            intra = sorted({e.intra_op_threads for e in ranks if e.intra_op_threads is not None})
            evidence.update(fair_share_threads=fair, recommended_threads=fair, ranks=[e.rank for e in ranks],
                            rank_omp_num_threads=omp, rank_intra_op_threads=intra)
            title = (f"{len(ranks)} torchrun ranks each run a pool of up to {per_proc} busy threads on {usable} "
                     f"usable CPUs ({runnable:.1f} threads wanted a CPU); threads waited {100 * share:.0f}% of their "
                     f"runnable time")
            suggestion = (f"Give each rank {fair} intra-op thread{'s' if fair > 1 else ''}: usable CPUs {usable} // "
                          f"{len(ranks)} ranks on this node. Export OMP_NUM_THREADS={fair} before torchrun (it keeps a "
                          f"value that is set) and do not raise it in the script, or call torch.set_num_threads({fair}) "
                          f"in each rank" + (f"; the ranks saw OMP_NUM_THREADS={','.join(omp)} but ran "
                                             f"{','.join(map(str, intra))} intra-op threads" if intra else "")
                          + "." + _sweep_note(t))
    elif (blas := blas_cause(report)) is not None:
        # the process's second pool is a BLAS's own (numpy's OpenBLAS): torch's count is not the one to lower
        evidence.update(cause="blas_pool", blas_check=blas.summary)
        title = (f"{blas.summary.rstrip('.')} ({runnable:.1f} threads wanted a CPU); threads waited "
                 f"{100 * share:.0f}% of their runnable time")
        suggestion = blas.suggestion or ""
    else:
        proc = compute[0] if compute else max(t.processes, key=lambda p: p.mean_runnable or 0, default=None)
        pools = proc.pools if proc else {}
        intra = sum(pools[k].active_threads for k in ("main", "intra_op") if k in pools)
        inter = pools["inter_op"].active_threads if "inter_op" in pools else 0
        env_omp = report.machine.threading_env.get("OMP_NUM_THREADS")
        # the target's own Python threads (a producer thread): /proc alone would have put them in torch's pool
        pid = proc.pid if proc else None
        own, left, python_cpus = t.busy_python(pid), threads_left(report, t, pid), _python_cpus(t, pid)
        evidence.update(cause="one_process", pid=pid, intra_op_active_threads=intra,
                        inter_op_active_threads=inter, recommended_threads=left)
        pool = f"{intra} busy intra-op threads" + (f" and {inter} inter-op threads" if inter else "")
        if own:
            evidence.update(python_threads=[{"name": p.name, "target": p.target, "started_at": p.started_at,
                                             "cpu_used": b.cpu_used} for p, b in own],
                            python_cpus=round(python_cpus, 2))
            pool += (f" beside {len(own)} busy Python thread{'s' if len(own) > 1 else ''} of its own "
                     f"({_thread_names(own)})")
        title = (f"{runnable:.1f} threads wanted the {usable} usable CPUs: one process runs {pool}; threads "
                 f"waited {100 * share:.0f}% of their runnable time" if runnable > usable else
                 f"one process runs {pool} on {usable} usable CPUs; they waited {100 * share:.0f}% of their "
                 f"runnable time ({runnable:.1f} wanted a CPU on average: they queue in bursts)")
        where = (f" OMP_NUM_THREADS={env_omp} is set in the environment: set it to {usable}."
                 if env_omp and env_omp.isdigit() and int(env_omp) > usable else "")
        suggestion = (f"Use at most one thread per usable CPU: torch.set_num_threads({usable}) (or remove a "
                      f"hard-coded larger value; torch's default counts CPUs the affinity/cgroup may not give)."
                      if not own else
                      f"The target's own Python thread{'s' if len(own) > 1 else ''} used "
                      f"{python_cpus:.1f} of the {usable} CPUs beside torch's {intra} intra-op threads: "
                      + (f"give torch the rest, torch.set_num_threads({left}), so torch's threads and yours fit the "
                         f"CPUs." if left < usable else
                         "too little for a CPU of its own, enough to make one of torch's threads wait whenever it "
                         "runs. Keep its work light, or measure whether fewer intra-op threads pay."))
        suggestion += (where
                       + (" Inter-op work runs beside it: torch.set_num_interop_threads(1) before any parallel work."
                          if inter else "")
                       + _sweep_note(t))
    location = None
    if evidence["cause"] == "one_process" or evidence.get("ranks"):
        one = evidence["cause"] == "one_process"
        limit = evidence["recommended_threads"] if one else evidence["fair_share_threads"]
        # a rank's own variable is torchrun's to set: only its set_num_threads call is the rank's line
        kinds = THREAD_COUNT_CALLS if one else ("set_num_threads",)
        call = cause_call(t, kinds, lambda n: n > limit)
        if call is not None:  # the target's own line that asked for more threads than CPUs
            location = call.location
            evidence["thread_call"] = dataclasses.asdict(call)
        elif one and evidence.get("python_threads"):  # else the line that started the busiest Python thread
            location = evidence["python_threads"][0]["started_at"]
    elif evidence["cause"] == "dataloader_workers":
        call = cause_call(t, ("DataLoader",), lambda n: n > 0)
        if call is not None:  # the DataLoader whose workers compete with the main pool
            location = call.location
            evidence["thread_call"] = dataclasses.asdict(call)
    if float(t.runqueue_wait_share) - share >= 0.01:  # other processes' CPUs explain some of the waiting
        title += (f" (their own pools': {100 * float(t.runqueue_wait_share):.0f}% in all, with other processes on "
                  f"{float(t.others_cpus):.2f} CPUs)")
    rec = t.sweep.recommendation if t.sweep else None
    gain = rec.gain_vs_configured_pct if rec else None
    stake = Stake(pct=round(100 * share, 1), basis=f"run-queue wait share ({UPPER_BOUND})", upper_bound=True)
    trial = (next((x for x in report.doctor.trials if x.check == BLAS_CHECK), None)
             if evidence["cause"] == "blas_pool" else thread_trial(report, "oversubscription"))
    measured_stake = _measured_stake(trial) if trial else None
    if trial is not None:
        evidence["trial"] = _trial_evidence(trial)
    if measured_stake is not None:  # measured on the steps, with an interval: it comes before the sweep's figure
        stake, clause = measured_stake[0] or unsure_stake(stake, [trial]), measured_stake[1]
        title += clause
        if gain is not None:
            evidence["sweep_gain_pct"] = gain
        if ruled_out(trial):
            severity, border = "low", None
            suggestion = (f"The measured cost is small for this workload: {trial.change} {_outcome(trial)}; fix it "
                          f"when convenient, since threads queueing for CPUs also slow everything else on the "
                          f"machine. " + suggestion)
    elif gain is not None:
        evidence["sweep_gain_pct"] = gain
        # throughput gained -> wall time saved
        stake = Stake(pct=round(saving_pct(1 + gain / 100) or 0.0, 1),
                      basis="wall time the thread sweep measured to save")
        title += f"; the thread sweep measured {gain:+.1f}% throughput with {rec.code}"
        if gain < SWEEP_NEGLIGIBLE_PCT:
            severity, border = "low", None
            suggestion = (f"The measured cost is small for this workload ({gain:+.1f}% throughput from the "
                          f"recommended setting); fix it when convenient, since threads queueing for CPUs also slow "
                          f"everything else on the machine. " + suggestion)
    return [Finding(kind="oversubscription", severity=severity, title=title, op=None, location=location,
                    evidence=evidence, suggestion=suggestion, layer="threads", stake=stake, borderline=border)]


def external_contention(report: Report) -> list[Finding]:
    t = report.threads
    if t is None or not _measured(t) or t.others_cpus is None:
        return []
    usable = _usable(report, t)
    others = float(t.others_cpus)
    share = float(t.runqueue_wait_share)
    minimum = _external_min_cpus(usable)
    severity = _severity(share, WAIT_SHARE_MEDIUM, WAIT_SHARE_HIGH, EXTERNAL_WAIT_SHARE_LOW)
    if others < minimum or severity is None:
        return []
    runnable = float(t.mean_runnable)
    own = runnable <= usable
    tops = t.other_processes
    names = ", ".join(f"{o.name} (pid {o.pid}, {o.cpu_s} CPU-s)" for o in tops[:3])
    title = (f"Other processes used {others:.1f} of the machine's CPUs while this run's threads waited "
             f"{100 * share:.0f}% of their runnable time"
             + (" - the waiting is not the workload's doing" if own else ""))
    return [Finding(
        kind="external_contention", severity=severity, title=title, op=None, location=None,
        evidence={"others_cpus": others, "threshold_others_cpus": minimum,
                  "machine_busy_cpus": t.machine_busy_cpus,
                  "cpu_used": t.cpu_used, "mean_runnable": runnable, "usable_cpus": usable,
                  "runqueue_wait_share": share, "share_pct": round(100 * share, 1),
                  "threshold_wait_share": {"high": WAIT_SHARE_HIGH, "medium": WAIT_SHARE_MEDIUM}.get(
                      severity, EXTERNAL_WAIT_SHARE_LOW),
                  "other_processes": [dataclasses.asdict(o) for o in tops[:5]], "method": t.method},
        suggestion=("Timings from this run are skewed by other load on the machine"
                    + (f" ({names})" if names else "")
                    + ". Re-run on a quiet machine, or give the workload CPUs of its own (taskset -c / a cpuset "
                      "cgroup) and set its thread count to those CPUs; do not tune the model's threads from this run."),
        layer="threads",
        stake=Stake(pct=round(100 * share, 1), basis="run-queue wait share (time other processes took)"),
    )]


@dataclasses.dataclass(frozen=True)
class Idle:
    """What the undersubscription rule measured when it fires."""

    usable: int
    cpu_used: float
    idle: float  # usable CPUs - cpu_used
    busy_share: float
    machine_busy: float | None
    wait_share: float


def undersubscribed(report: Report) -> Idle | None:
    """The idle usable CPUs of a CPU-bound run, when they make an undersubscription finding (module docstring)."""
    t = report.threads
    if t is None or not _measured(t) or t.cpu_used is None or t.busy_share is None:
        return None
    usable = _usable(report, t)
    cpu_used = float(t.cpu_used)
    idle = usable - cpu_used
    busy_share = float(t.busy_share)
    machine_busy = t.machine_busy_cpus
    seen = t.machine_cpus_seen
    # /proc/stat covers every CPU of the machine: it says whether the usable ones sat idle
    # only when they are all there is (not for a run pinned to a few CPUs of a big host)
    comparable = machine_busy is not None and (seen is None or seen <= usable + 0.5)
    machine_idle = usable - float(machine_busy) if comparable else idle
    share = float(t.runqueue_wait_share)
    if busy_share < UNDER_MIN_BUSY_SHARE or idle < UNDER_MIN_IDLE_CPUS or machine_idle < UNDER_MIN_IDLE_CPUS \
            or share >= WAIT_SHARE_MEDIUM:
        return None
    return Idle(usable, cpu_used, idle, busy_share, machine_busy, share)


def undersubscription(report: Report) -> list[Finding]:
    measured = undersubscribed(report)
    if measured is None:
        return []
    t = report.threads
    usable, cpu_used, idle, share = measured.usable, measured.cpu_used, measured.idle, measured.wait_share
    intra = report.machine.intra_op_threads
    compute = _compute_processes(t)
    active = sum(_active(p) for p in compute)
    configured_low = intra is not None and intra < usable
    severity = "medium" if configured_low and idle / usable >= UNDER_MEDIUM_IDLE_SHARE else "low"
    evidence: dict[str, Any] = {
        "cpu_used": cpu_used, "usable_cpus": usable, "idle_cpus": round(idle, 3),
        "threshold_idle_cpus": UNDER_MIN_IDLE_CPUS, "busy_share": measured.busy_share,
        "threshold_busy_share": UNDER_MIN_BUSY_SHARE, "machine_busy_cpus": measured.machine_busy,
        "runqueue_wait_share": share, "mean_runnable": t.mean_runnable,
        "intra_op_threads": intra, "active_threads": active,
        "share_pct": round(100 * idle / usable, 1),
        "processes": _process_evidence(compute), "method": t.method}
    title = (f"CPU-bound but using {cpu_used:.1f} of {usable} usable CPUs: {idle:.1f} CPUs sat idle"
             + (f" with {intra} intra-op thread{'s' if intra != 1 else ''}" if intra is not None else ""))
    stake = Stake(pct=round(100 * idle / usable, 1), upper_bound=True,
                  basis=f"idle usable CPUs' share (perfect scaling, {UPPER_BOUND})")
    location = None
    if configured_low:
        call = cause_call(t, THREAD_COUNT_CALLS, lambda n: n < usable)
        if call is not None:  # the target's own line that asked for fewer threads than CPUs
            location = call.location
            evidence["thread_call"] = dataclasses.asdict(call)
        what = (f"torch.set_num_threads({call.threads}) at {call.location}" if call and call.call == "set_num_threads"
                else f"{call.call}={call.threads} set at {call.location}" if call else None)
        suggestion = (f"The work is CPU-bound but torch runs {intra} intra-op thread{'s' if intra != 1 else ''} "
                      f"on {usable} usable CPUs" + (f" ({what})" if what else "")
                      + f": torch.set_num_threads({usable}) (or remove the smaller "
                      f"OMP_NUM_THREADS / set_num_threads value).")
        trial = thread_trial(report, "undersubscription")
        measured_stake = _measured_stake(trial) if trial else None
        if trial is not None:
            evidence["trial"] = _trial_evidence(trial)
        if measured_stake is not None:
            stake, clause = measured_stake[0] or unsure_stake(stake, [trial]), measured_stake[1]
            title += clause
            if ruled_out(trial):
                severity = "low"
                suggestion = (f"Not confirmed on this machine: {trial.change} {_outcome(trial)}. "
                              + suggestion + _sweep_note(t))
        else:
            suggestion += " Check the speed-up." + _sweep_note(t)
    else:
        suggestion = ("The busy thread is serial work that torch's pool does not spread: Python between "
                      "operators, or operators too small to parallelise. Batch more work per operator, move "
                      "data preparation into DataLoader workers, or run independent work in parallel processes "
                      "(see the python and operators sections).")
    return [Finding(
        kind="undersubscription", severity=severity, title=title, op=None, location=location,
        evidence=evidence, suggestion=suggestion, layer="threads", stake=stake,
        # serial work (Python, small operators) leaves the CPUs idle: a consequence the python
        # and operators findings name the cause of, not a setting to fix
        observation=not configured_low,
    )]
