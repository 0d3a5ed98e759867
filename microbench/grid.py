"""A Compare-style grid: one row per case (shape), one column per thread count. Renderers only.

Contract
- `Grid.from_results(results)` arranges the measured rows: a row per case in
  the order they were measured (the given shapes first, then fuzzed ones),
  a column per thread count, ascending. It derives everything from the rows'
  per-block times; nothing is measured here.
- Numbers follow `torch.utils.benchmark.Compare` with `trim_significant_figures()`
  and `highlight_warnings()`: one time unit for the whole grid
  (`common.select_unit` of the fastest cell), each cell rounded to the
  significant figures its own spread supports (`Measurement.significant_figures`:
  a 1.645-sigma interval of the median from the interquartile points, at least
  25 ns, 1 to 4 figures), each column printed with the decimals of its least
  precise cell, and `(! XX%)` beside a cell whose IQR/median is >= 10%.
- Colours follow Compare's thresholds against the best (lowest) time:
  <= 1.01x (or within 100 ns) best (green, bold), <= 1.1x good (blue, bold),
  >= 2x bad (dim red), >= 5x very bad (red). `rowwise` (the default) compares
  the thread counts of one shape: which setting wins for that shape;
  `columnwise` compares the shapes at one thread count (Compare's default;
  meaningful with `per_work`, where the cells are time per unit of work).
- Three renderings of the same cells: `text` (ANSI colours when `color`),
  `markdown` (the best cell bold, bad ones marked), `as_dict` (JSON: every
  cell's median, IQR, figures, the printed string and its colour class).
- `run_extras(results)`: what `run` prints after its detailed table: the grid
  when there are several shapes, then the fuzz verdicts (render.fuzz_text).
  It lives here, not in render.py, so that render.py (the tables this module
  draws with) never imports the grid back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from microbench.render import case_title, fuzz_text, table
from microbench.results import Results, Row

BEST = "\033[92m"
GOOD = "\033[34m"
BAD = "\033[2m\033[91m"
VERY_BAD = "\033[31m"
BOLD = "\033[1m"
TERMINATE = "\033[0m"
COLORS = {"best": BEST + BOLD, "good": GOOD + BOLD, "bad": BAD, "very_bad": VERY_BAD + BOLD}

MIN_CONFIDENCE_INTERVAL_S = 25e-9    # torch.utils.benchmark.utils.common._MIN_CONFIDENCE_INTERVAL
MAX_SIGNIFICANT_FIGURES = 4          # ... _MAX_SIGNIFICANT_FIGURES
WARN_SPREAD = 0.10                   # Measurement warns from IQR/median >= 10%
UNITS = (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0))
UNIT_NAMES = {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}


def significant_figures(times_s: list[float], median_s: float) -> int:
    """`Measurement.significant_figures` on per-call times (seconds)."""
    xs = sorted(times_s)
    n = len(xs)
    if n == 0 or median_s <= 0:
        return 1
    inner = xs[n // 4:math.ceil(3 * n / 4)]
    mean = sum(inner) / len(inner)
    std = math.sqrt(sum((x - mean) ** 2 for x in inner) / len(inner))
    ci = max(1.645 * std / math.sqrt(len(inner)), MIN_CONFIDENCE_INTERVAL_S)
    return min(max(int(math.floor(math.log10(median_s / ci))), 1), MAX_SIGNIFICANT_FIGURES)


def select_unit(seconds: float) -> tuple[str, float]:
    """`common.select_unit`: ns/us/ms/s by the magnitude of `seconds`."""
    k = int(math.log10(seconds) // 3) if seconds > 0 else -3
    return {-3: UNITS[0], -2: UNITS[1], -1: UNITS[2]}.get(k, UNITS[3])


def trim_sigfig(x: float, n: int) -> float:
    """`common.trim_sigfig`: 3.14159, 2 -> 3.1."""
    if x == 0:
        return 0.0
    magnitude = int(math.ceil(math.log10(abs(x))))
    scale = 10.0 ** (magnitude - n)
    return float(round(x / scale) * scale)


def color_class(value: float, best: float, absolute_slack: float) -> str | None:
    """Compare's `_Row.color_segment` thresholds; `absolute_slack` is 100 ns in the value's unit."""
    if value <= best * 1.01 or value <= best + absolute_slack:
        return "best"
    if value <= best * 1.1:
        return "good"
    if value >= best * 5:
        return "very_bad"
    if value >= best * 2:
        return "bad"
    return None


@dataclass
class Cell:
    median_s: float
    iqr_s: float
    figures: int
    contended: bool
    text: str = ""
    color: str | None = None

    @property
    def spread(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf


@dataclass
class Grid:
    title: str
    threads: list[int]
    row_names: list[str]
    cells: list[list[Cell | None]]           # [row][column]
    unit: str
    scale: float                             # seconds per unit
    colorize: str = "rowwise"                # rowwise | columnwise | none
    per_work: str | None = None              # None: time per call; "GFLOP" / "GB": time per unit of work
    fuzzed_from: int | None = None           # index of the first fuzzed row
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_results(cls, res: Results, *, colorize: str = "rowwise", per_work: bool = False) -> "Grid":
        threads = sorted({r.threads for r in res.rows})
        names: list[str] = []
        by_name: dict[str, dict[int, Row]] = {}
        fuzzed_from = None
        for r in res.rows:
            name = case_title(r)
            if name not in by_name:
                if fuzzed_from is None and res.is_fuzzed(r):
                    fuzzed_from = len(names)
                names.append(name)
                by_name[name] = {}
            by_name[name][r.threads] = r
        work_unit = None
        if per_work:
            rows = list(res.rows)
            work_unit = "GFLOP" if rows and all(r.flops for r in rows) else "GB"
        cells: list[list[Cell | None]] = []
        for name in names:
            line: list[Cell | None] = []
            for t in threads:
                r = by_name[name].get(t)
                if r is None or r.median_us <= 0:
                    line.append(None)
                    continue
                times = [x * 1e-6 for x in r.times_us] or [r.median_us * 1e-6]
                div = 1.0
                if work_unit == "GFLOP":
                    div = r.flops / 1e9
                elif work_unit == "GB":
                    div = (r.bytes or 0) / 1e9 or 1.0
                times = [x / div for x in times]
                med = r.median_us * 1e-6 / div
                line.append(Cell(median_s=med, iqr_s=r.iqr_us * 1e-6 / div,
                                 figures=significant_figures(times, med), contended=r.contended))
            cells.append(line)
        medians = [c.median_s for line in cells for c in line if c]
        unit, scale = select_unit(min(medians)) if medians else ("us", 1e-6)
        op = res.rows[0].op if res.rows else ""
        title = f"{op}: time per {'call' if not work_unit else work_unit}, {len(names)} shape(s) x " \
                f"{len(threads)} thread count(s)"
        grid = cls(title=title, threads=threads, row_names=names, cells=cells, unit=unit, scale=scale,
                   colorize=colorize, per_work=work_unit, fuzzed_from=fuzzed_from)
        grid._format()
        return grid

    # -- what every renderer shares ------------------------------------------------------------

    def _format(self) -> None:
        """Cell strings (trimmed figures, one template per column) and colour classes."""
        for j in range(len(self.threads)):
            column = [line[j] for line in self.cells if line[j] is not None]
            if not column:
                continue
            leading = [int(math.ceil(math.log10(c.median_s / self.scale))) for c in column]
            unit_digits = max(leading)
            decimals = min(max(c.figures - d, 0) for c, d in zip(column, leading))
            width = unit_digits + decimals + (1 if decimals else 0)
            for c in column:
                value = trim_sigfig(c.median_s / self.scale, c.figures)
                c.text = f"{value:>{width}.{decimals}f}"
                if c.spread >= WARN_SPREAD:
                    c.text += f" (! {c.spread * 100:.0f}%)"
                if c.contended:
                    c.text += " c"
        slack = 100e-9 / self.scale
        for i, line in enumerate(self.cells):
            for j, c in enumerate(line):
                if c is None or self.colorize == "none":
                    continue
                if self.colorize == "rowwise":
                    pool = [x for x in line if x is not None]
                else:
                    pool = [ln[j] for ln in self.cells if ln[j] is not None]
                best = min(x.median_s for x in pool) / self.scale
                c.color = color_class(c.median_s / self.scale, best, slack) if len(pool) > 1 else None

    def _legend(self) -> list[str]:
        what = "per call" if not self.per_work else f"per {self.per_work} of work"
        lines = [f"Times are in {UNIT_NAMES[self.unit]}s ({self.unit}) {what}: medians, each rounded to the "
                 "significant figures its spread supports."]
        if any(c and c.spread >= WARN_SPREAD for line in self.cells for c in line):
            lines.append("(! XX%) Measurement has high variance, where XX is the IQR / median * 100.")
        if any(c and c.contended for line in self.cells for c in line):
            lines.append("c: other processes held CPUs this measurement's threads needed (contended).")
        if self.colorize != "none":
            what = "thread counts of each shape" if self.colorize == "rowwise" else "shapes at each thread count"
            lines.append(f"Colours compare the {what} (torch Compare's thresholds): best <= 1.01x the fastest, good <= 1.1x, bad >= 2x, "
                         "very bad >= 5x.")
        if self.fuzzed_from is not None:
            lines.append(f"Rows from {self.fuzzed_from + 1} on are fuzzed shapes (--fuzz).")
        return lines + self.notes

    # -- renderers -------------------------------------------------------------------------------

    def text(self, color: bool = False) -> str:
        header = [""] + [f"{t} thread{'s' if t != 1 else ''}" for t in self.threads]
        rows = [[f"  {'~ ' if self.fuzzed_from is not None and i >= self.fuzzed_from else ''}{name}"]
                + [c.text if c else "" for c in line] for i, (name, line) in enumerate(zip(self.row_names, self.cells))]

        def paint(i: int, j: int, text: str) -> str:
            c = self.cells[i][j]
            return COLORS[c.color] + text + TERMINATE * 2 if color and c is not None and c.color else text

        return table(self.title, header, [(None, rows)], footer=self._legend(), paint=paint)

    def markdown(self) -> str:
        marks = {"best": "**{}**", "good": "*{}*", "bad": "{} ▲", "very_bad": "{} ▲▲"}
        header = ["shape"] + [f"{t} thread{'s' if t != 1 else ''}" for t in self.threads]
        out = [f"**{self.title}**", "", "| " + " | ".join(header) + " |",
               "| --- |" + " ---: |" * len(self.threads)]
        for i, (name, line) in enumerate(zip(self.row_names, self.cells)):
            fuzz = "~ " if self.fuzzed_from is not None and i >= self.fuzzed_from else ""
            cells = []
            for c in line:
                if c is None:
                    cells.append("-")
                    continue
                s = c.text.strip()
                cells.append(marks[c.color].format(s) if c.color in marks else s)
            out.append(f"| {fuzz}`{name}` | " + " | ".join(cells) + " |")
        legend = self._legend()
        if self.colorize != "none":
            legend.append("Marks: **bold** best, *italic* good, ▲ bad (>= 2x the best), ▲▲ very bad (>= 5x).")
        return "\n".join(out + [""] + legend)

    def as_dict(self) -> dict:
        return {
            "format": "microbench-grid", "title": self.title, "unit": self.unit, "per_work": self.per_work,
            "colorize": self.colorize, "threads": self.threads,
            "rows": [{"shape": name, "fuzzed": self.fuzzed_from is not None and i >= self.fuzzed_from,
                      "cells": [None if c is None else {
                          "threads": t, "median": c.median_s / self.scale, "iqr": c.iqr_s / self.scale,
                          "significant_figures": c.figures, "text": c.text.strip(), "color": c.color,
                          "high_variance": c.spread >= WARN_SPREAD, "contended": c.contended}
                          for t, c in zip(self.threads, line)]}
                     for i, (name, line) in enumerate(zip(self.row_names, self.cells))],
            "legend": self._legend(),
        }


def run_extras(res: Results, color: bool = False) -> str:
    """What `run` prints after the detailed table (render.results_table): the grid when there are several
    shapes, then the fuzz verdicts."""
    parts = [""]
    if len({case_title(r) for r in res.rows}) > 1:
        parts.append(Grid.from_results(res).text(color=color))
    verdicts = fuzz_text(res)
    if verdicts:
        parts.append(verdicts)
    return "\n\n".join(parts) if len(parts) > 1 else ""
