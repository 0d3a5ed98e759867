"""The results file: typed rows, versioned JSON, load with checks.

Format history (`format_version`):
  1  first version (issue 5): `measurements` rows, `skipped`, `machine`,
     `settings`, `notes`. Compare files are `format: microbench-compare`.
  2  issue 21: a top-level `callgrind` list, one entry per case counted
     with --callgrind: the row's key (op, input_shapes, dtypes, contiguous,
     strides, threads = 1) and `number`, `total`, `functions` (the
     standardized exclusive function counts of `number` calls, top 200 by
     count); `settings` gains `autorange` ("adaptive" | "blocked") and `fuzz`
     ({n, seed, spread, shapes, rule} or null: rows whose input_shapes are in
     `fuzz.shapes` are the fuzzed ones); results from --fuzz carry a derived
     `fuzz_verdicts` list (recomputed on load, never read back). The
     measurement rows are unchanged (diagnose's report embeds them as
     MicrobenchRow). Compare files gain `callgrind` per row. A v1 file is
     read through `_migrate_1_to_2`: no function counts, nothing fuzzed,
     autorange "adaptive" (the only one v1 had).

Readers accept any file whose `format` is ours and whose version is <= the
one they know; a newer file is refused with a one-line error rather than
misread.

The derived `fuzz_verdicts` (`fuzz_verdicts(rows, fuzzed_flags)`, here
because the file carries them; microbench.fuzz draws the shapes): whether a
behaviour is specific to the given shape. For each thread count, the cost
per unit of work (median time / FLOPs when torch counts FLOPs for every
shape, else / bytes touched) of the given shape is compared with the fuzzed
shapes' costs. It is **specific to the shape** when it lies outside the
fuzzed range (below the cheapest or above the dearest) AND more than
`FUZZ_MARGIN` (15%) from their median; otherwise it **holds around it**. At
least `MIN_FUZZED` (3) fuzzed shapes must have been measured at that thread
count, else "undecided". Contended rows are left out (they measure the busy
machine).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from microbench.cases import profiler_dtype_name, torch_dtype_name
from microbench.errors import UsageError
from microbench.stats import median

FORMAT = "microbench-results"
COMPARE_FORMAT = "microbench-compare"
FORMAT_VERSION = 2

FUZZ_MARGIN = 0.15
MIN_FUZZED = 3
_PER_G = 1e9          # us per FLOP (byte) -> us per GFLOP (GB)
FUZZ_RULE = (f"per thread count, time per unit of work (FLOP, else byte) of the given shape against the fuzzed "
             f"shapes': specific to the shape when outside their range and more than {FUZZ_MARGIN:.0%} from their "
             f"median; else it holds around it (>= {MIN_FUZZED} fuzzed shapes measured, contended rows left out)")


@dataclass
class Row:
    """One measurement: one case at one thread count. Times in microseconds."""
    op: str
    overload: str
    input_shapes: list
    dtypes: list
    contiguous: bool
    strides: list | None
    layout: str
    threads: int
    median_us: float
    iqr_us: float
    runs: int                        # measured blocks
    number_per_run: int              # calls per block
    noise_pct: float                 # IQR / median * 100
    noisy: bool                      # noise_pct >= 10
    flops: int | None = None
    gflops_per_s: float | None = None
    bytes: int | None = None         # inputs + outputs: a lower bound on memory traffic
    gbytes_per_s: float | None = None
    speedup_vs_1_thread: float | None = None
    parallel_efficiency: float | None = None
    # the reference measured beside the case (measure.reference_side): its median at 1 thread / here, what the CPUs
    # gave perfectly parallel work meanwhile; None at 1 thread or without a 1-thread row
    reference_speedup: float | None = None
    others_cpus: float | None = None   # CPUs other processes used meanwhile (/proc/stat, incl. steal)
    contended: bool = False            # others took CPUs these threads needed: time measures the machine
    source: str | None = None
    self_pct: float | None = None
    reproducer: str | None = None
    assumed_args: dict = field(default_factory=dict)
    stmt: str = ""
    instructions_per_call: int | None = None
    callgrind_number: int | None = None
    times_us: list = field(default_factory=list)
    # per-call median of each interleaved turn, in turn order: the i-th turns of a case's counts ran side by side
    turns_us: list = field(default_factory=list)

    @property
    def key(self) -> tuple:
        """What a comparison matches on: (op, shapes, dtypes, layout, threads)."""
        return (self.op, json.dumps(self.input_shapes), json.dumps(_norm_dtypes(self.dtypes)),
                "contiguous" if self.contiguous else json.dumps(self.strides), self.threads)


def _norm_dtypes(dtypes: list) -> list:
    out = []
    for d in dtypes or []:
        t = torch_dtype_name(d) if isinstance(d, str) else None
        out.append(profiler_dtype_name(t) if t else d)
    return out


@dataclass
class Results:
    command: str                      # "from-report" or "run"
    machine: dict
    settings: dict
    rows: list[Row] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source_report: str | None = None
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    elapsed_s: float | None = None
    callgrind: list[dict] = field(default_factory=list)   # function-level counts per case (format 2)

    def callgrind_of(self, row: Row) -> dict | None:
        """The function-level callgrind counts kept for this row's case (1 thread), if any."""
        for c in self.callgrind:
            key = Row(op=c["op"], overload="", input_shapes=c["input_shapes"], dtypes=c.get("dtypes") or [],
                      contiguous=c.get("contiguous", True), strides=c.get("strides"), layout="",
                      threads=c.get("threads", 1), median_us=0, iqr_us=0, runs=0, number_per_run=0,
                      noise_pct=0, noisy=False).key
            if key == row.key:
                return c
        return None

    def is_fuzzed(self, row: Row) -> bool:
        """A row at a shape --fuzz drew (settings.fuzz.shapes), not one the user gave."""
        fuzz = (self.settings or {}).get("fuzz") or {}
        return any(json.dumps(s) == json.dumps(row.input_shapes) for s in fuzz.get("shapes") or [])

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": self.created,
            "command": self.command,
            "source_report": self.source_report,
            "machine": self.machine,
            "settings": self.settings,
            "elapsed_s": self.elapsed_s,
            "measurements": [asdict(r) for r in self.rows],
            "skipped": self.skipped,
            "notes": self.notes,
            "callgrind": self.callgrind,
            **({"fuzz_verdicts": self.fuzz_verdicts()} if (self.settings or {}).get("fuzz") else {}),
        }

    def fuzz_verdicts(self) -> list[dict]:
        """Derived from the rows (`fuzz_verdicts` below): written for readers, never read back."""
        return fuzz_verdicts(self.rows, [self.is_fuzzed(r) for r in self.rows])


def _cost(r: Row, unit: str) -> float | None:
    work = r.flops if unit == "flop" else r.bytes
    if not work or r.median_us <= 0 or r.contended:
        return None
    return r.median_us / work


def fuzz_verdicts(rows: list[Row], fuzzed_flags: list[bool]) -> list[dict]:
    """One verdict per thread count (the rule: the module docstring, FUZZ_RULE); `fuzzed_flags[i]` says
    whether rows[i] is at a fuzzed shape."""
    given = [r for r, f in zip(rows, fuzzed_flags) if not f]
    fuzzed = [r for r, f in zip(rows, fuzzed_flags) if f]
    if not given or not fuzzed:
        return []
    unit = "flop" if all(r.flops for r in rows) else "byte"
    per = "GFLOP" if unit == "flop" else "GB"
    out = []
    for t in sorted({r.threads for r in given}):
        g = next((r for r in given if r.threads == t), None)
        mine = _cost(g, unit) if g else None
        costs = [c for c in (_cost(r, unit) for r in fuzzed if r.threads == t) if c is not None]
        item = {"threads": t, "unit": per, "fuzzed_measured": len(costs),
                "given_us_per_unit": None if mine is None else round(mine * _PER_G, 4),
                "fuzzed_median_us_per_unit": None, "fuzzed_min_us_per_unit": None,
                "fuzzed_max_us_per_unit": None, "ratio": None, "verdict": "undecided", "why": ""}
        if mine is None or len(costs) < MIN_FUZZED:
            item["why"] = (f"only {len(costs)} fuzzed shape(s) measured (need {MIN_FUZZED})" if mine is not None
                           else "the given shape has no usable measurement here")
            out.append(item)
            continue
        mid, lo, hi = median(costs), min(costs), max(costs)
        ratio = mine / mid
        item.update(fuzzed_median_us_per_unit=round(mid * _PER_G, 4), fuzzed_min_us_per_unit=round(lo * _PER_G, 4),
                    fuzzed_max_us_per_unit=round(hi * _PER_G, 4), ratio=round(ratio, 3))
        outside = mine < lo or mine > hi
        if outside and abs(math.log(ratio)) > math.log1p(FUZZ_MARGIN):
            dearer = mine > hi
            item["verdict"] = "specific to the shape"
            item["why"] = (f"{'slower' if dearer else 'faster'} per {per} than all {len(costs)} shapes around it "
                           f"({ratio:.2f}x their median)")
        else:
            item["verdict"] = "holds around it"
            if outside:
                where = (f"{'below' if mine < lo else 'above'} all {len(costs)} shapes around it but within "
                         f"{FUZZ_MARGIN:.0%} of their median")
            else:
                where = f"inside the range of {len(costs)} shapes around it"
            item["why"] = f"{where}: {ratio:.2f}x their median (range {lo / mid:.2f}x-{hi / mid:.2f}x)"
        out.append(item)
    return out


def check_writable(path: str) -> None:
    """Refuse an output path before spending minutes measuring."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, expected a file name for the JSON output")
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise UsageError(f"cannot write {path}: {probe} is not a writable directory")


def write_json(data: dict, path: str) -> None:
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, expected a file name for the JSON output")
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def save(results: Results, path: str) -> None:
    write_json(results.to_dict(), path)


def read_json(path: str, what: str) -> Any:
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, expected a {what}")
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None


def _migrate_1_to_2(data: dict) -> dict:
    """v1 had one autorange (adaptive), no function-level callgrind counts and no fuzzing."""
    settings = dict(data.get("settings") or {})
    settings.setdefault("autorange", "adaptive")
    settings.setdefault("fuzz", None)
    return {**data, "settings": settings, "callgrind": [], "format_version": 2}


MIGRATIONS = {1: _migrate_1_to_2}   # version -> function to the next version


_ROW_FIELDS = {f.name for f in fields(Row)}
_REQUIRED = ("op", "input_shapes", "threads", "median_us", "iqr_us")


def load(path: str) -> Results:
    data = read_json(path, "microbench results file")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path}: not a microbench results file (no \"format\": \"{FORMAT}\")")
    version = data.get("format_version")
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise UsageError(f"{path}: results format version {version!r} is newer than this microbench "
                         f"understands ({FORMAT_VERSION})")
    while version < FORMAT_VERSION:
        data = MIGRATIONS[version](data)
        version = data["format_version"]
    rows = []
    for i, raw in enumerate(data.get("measurements") or []):
        if not isinstance(raw, dict) or any(k not in raw for k in _REQUIRED):
            raise UsageError(f"{path}: measurement {i} lacks one of {', '.join(_REQUIRED)}")
        values = {k: v for k, v in raw.items() if k in _ROW_FIELDS}
        values.setdefault("overload", "")
        values.setdefault("dtypes", [])
        values.setdefault("contiguous", True)
        values.setdefault("strides", None)
        values.setdefault("layout", "")
        values.setdefault("runs", 0)
        values.setdefault("number_per_run", 0)
        med = float(values["median_us"])
        values.setdefault("noise_pct", 100.0 * float(values["iqr_us"]) / med if med > 0 else 0.0)
        values.setdefault("noisy", values["noise_pct"] >= 10.0)
        rows.append(Row(**values))
    return Results(command=data.get("command", ""), machine=data.get("machine") or {},
                   settings=data.get("settings") or {}, rows=rows, skipped=data.get("skipped") or [],
                   notes=data.get("notes") or [], source_report=data.get("source_report"),
                   created=data.get("created", ""), elapsed_s=data.get("elapsed_s"),
                   callgrind=[c for c in data.get("callgrind") or [] if isinstance(c, dict) and "functions" in c])
