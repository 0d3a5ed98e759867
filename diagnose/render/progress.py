"""Progress lines on stderr while passes run.

Passes whose output is captured get a live elapsed-time ticker when stderr is
a terminal; the uninstrumented pass prints the target's own output, so it
gets only a start and an end line. A series of re-runs (doctor trials,
what-if passes, sweep points, repeats: one kind, "[i/n] doctor") says the
time it has left once one of its passes has finished: the passes left times
the median pass so far (a Whisper loop's 21 doctor passes took 45-67 s each,
~25 minutes, where the line counted passes and said nothing of the time).
"""

from __future__ import annotations

import statistics
import sys
from typing import TextIO

from diagnose.launch import PassOutcome
from diagnose.render import fmt


class TerminalProgress:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.live = False
        self.label = ""
        self.kind = ""  # the name pass_started was given: a layer's, or a series of re-runs' kind ("doctor")
        self.took: dict[str, list[float]] = {}  # each kind's finished passes' times, for the time left
        self.tty = self.stream.isatty()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def pass_started(self, index: int, total: int, name: str, description: str, captured: bool) -> None:
        self.label, self.kind = f"[{index}/{total}] {name}", name
        self.live = captured and self.tty
        took = self.took.get(name)
        if took and index <= total:  # the passes left, this one included, at the median pass so far
            description += f" (about {left(statistics.median(took) * (total - index + 1))} left)"
        self._write(f"{self.label}: {description}\n" if not self.live else f"{self.label}: {description} ...")

    def tick(self, elapsed_s: float) -> None:
        if self.live:
            self._write(f"\r\x1b[K{self.label}: running {elapsed_s:.0f} s")

    def pass_finished(self, name: str, outcome: PassOutcome) -> None:
        self.took.setdefault(self.kind, []).append(outcome.elapsed_s)
        prefix = "\r\x1b[K" if self.live else ""
        status = {"ok": "done", "target_failed": "target failed", "crashed": "crashed",
                  "timeout": "timed out", "interrupted": "interrupted"}.get(outcome.status, outcome.status)
        self._write(f"{prefix}{self.label}: {status} in {fmt.duration(outcome.elapsed_s)}\n")
        if outcome.status != "ok" and outcome.output_tail:
            self._write("".join(f"    | {line}\n" for line in outcome.output_tail[-5:]))

    def layer_finished(self, name: str, status: str, elapsed_s: float) -> None:
        prefix = "\r\x1b[K" if self.live else ""
        self._write(f"{prefix}{self.label}: {'done' if status == 'ok' else status} in {fmt.duration(elapsed_s)}\n")

    def note(self, text: str) -> None:
        prefix = "\r\x1b[K" if self.live else ""
        self.live = False
        self._write(f"{prefix}{text}\n")


def left(seconds: float) -> str:
    """A time left, as rounded as an estimate from a few passes deserves."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    return f"{seconds / 60:.0f} min"
