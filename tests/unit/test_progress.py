"""The progress lines: a series of re-runs says the time it has left once one of its passes has finished."""

from __future__ import annotations

import io

from diagnose.launch import PassOutcome
from diagnose.render.progress import TerminalProgress, left


def _done(seconds: float) -> PassOutcome:
    return PassOutcome(name="p", status="ok", result=None, returncode=0, elapsed_s=seconds)


def test_a_series_of_re_runs_says_the_time_it_has_left_from_its_median_pass():
    out = io.StringIO()
    progress = TerminalProgress(out)
    progress.pass_started(6, 7, "doctor", "environment checks and trials", True)
    progress.pass_started(1, 21, "doctor", "trial baseline", True)
    progress.pass_finished("trial-1-baseline", _done(50.0))
    progress.pass_started(2, 21, "doctor", "trial jemalloc", True)
    progress.pass_finished("trial-1-jemalloc", _done(70.0))
    progress.pass_finished("trial-1-glibc", _done(55.0))
    progress.pass_started(4, 21, "doctor", "trial baseline", True)
    lines = out.getvalue().splitlines()
    # no estimate before a pass of the kind has finished, not on the layer's own line
    assert lines[0] == "[6/7] doctor: environment checks and trials" and lines[1] == "[1/21] doctor: trial baseline"
    # 20 passes left at 50 s, then 18 at the median of 50, 70 and 55 s: 17 min and 16 min
    assert lines[2] == "[1/21] doctor: done in 50.00 s"
    assert lines[3] == "[2/21] doctor: trial jemalloc (about 17 min left)", lines
    assert lines[-1] == "[4/21] doctor: trial baseline (about 16 min left)", lines
    # another kind keeps its own passes' times: a what-if series has none yet
    progress.pass_started(1, 6, "what-if", "trial compile", True)
    assert out.getvalue().splitlines()[-1] == "[1/6] what-if: trial compile"


def test_the_time_left_is_rounded_as_an_estimate_deserves():
    assert left(0.2) == "1 s" and left(42.4) == "42 s" and left(89.0) == "89 s"
    assert left(95.0) == "2 min" and left(25 * 60 + 10) == "25 min"
