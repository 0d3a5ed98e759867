"""Rules on the steps of a script-mode run (report.steps): data_wait.

- data_wait: the window's steps spent >= DATA_WAIT_MIN_PCT (10%) of their
  wall time inside DataLoader iterators (waiting for the next batch: with
  num_workers=0 the loading itself, with workers the time they fell behind).
  Its time at stake is that share (the step could overlap all of it with
  compute); severity follows from it (findings/stake.py). Paddle's profiler
  reports the same split as reader cost against batch cost. The share's
  lines (10%, 25% medium, 50% high) are judged on its interval from the
  run's noise, as every share's (report/borderline.py).
"""

from __future__ import annotations

from diagnose.report import borderline
from diagnose.report.model import Finding, Report, Stake

DATA_WAIT_MIN_PCT = 10.0


def data_wait(report: Report) -> list[Finding]:
    st, wall = report.steps, report.run.wall_s
    if st is None or not st.data_wait_s or not wall or not st.window_steps:
        return []
    share = 100.0 * st.data_wait_s / wall
    severity, border = borderline.grade(share, borderline.noise(report),
                                        ((50.0, "high"), (25.0, "medium"), (DATA_WAIT_MIN_PCT, "low")),
                                        "share of the window's wall time waiting for data")
    if severity is None:
        return []
    workers = report.threads.dataloader_workers if report.threads else None
    if workers:
        what = (f"The {workers} DataLoader workers do not keep up with the steps: more workers (within the usable "
                "CPUs, beside the intra-op threads), cheaper per-sample work (precompute or cache transforms, "
                "decode once), a larger prefetch_factor, persistent_workers=True.")
    else:
        what = ("Batches are loaded in the training process, between steps: DataLoader(..., num_workers=N, "
                "persistent_workers=True) prepares them in worker processes while the step computes (leave the "
                "intra-op threads plus N within the usable CPUs), or precompute the data once.")
    return [Finding(
        kind="data_wait", severity=severity, layer="steps", borderline=border,
        title=(f"The steps wait for data {share:.0f}% of the time: {st.data_wait_s:.3g} s of the window's "
               f"{wall:.3g} s inside DataLoader iterators"
               + (f" at {st.data_wait_at}" if st.data_wait_at else "")),
        op=None, location=st.data_wait_at,
        evidence={"data_wait_s": st.data_wait_s, "window_wall_s": round(wall, 6), "share_pct": round(share, 1),
                  "window_steps": st.window_steps, "dataloader_workers": workers,
                  "threshold_pct": DATA_WAIT_MIN_PCT},
        suggestion=what,
        stake=Stake(pct=round(share, 1), basis="the window's time inside DataLoader iterators (uninstrumented pass)"),
    )]
