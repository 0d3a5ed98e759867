"""report.json: writing, reading, and migrating older schema versions.

`to_dict` turns the dataclasses into plain JSON data; `from_json_data` rebuilds
them from type hints, so the model stays the one place the fields are named.
MIGRATIONS turns each older version into the next ("1" -> "2" -> "3" -> "4"), so a
file of any version is read as the current one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from typing import Any

from diagnose.errors import UsageError
from diagnose.report.model import PEAKS_CONTENDED_DOUBT, SCHEMA_VERSION, Report


def _v1_to_v2(data: dict) -> dict:
    """"1" -> "2": the sections that were untyped dicts become typed sections (docs/report.md). A section
    that was `{}` (nothing measured) is null in "2"; a section whose fields moved is rebuilt by its entry in
    V1_SECTIONS (section name -> v1 value -> v2 value)."""
    new = dict(data, schema_version="2")
    for key, convert in V1_SECTIONS.items():
        if key in new:
            new[key] = convert(new[key])
    return new


def _empty_is_null(section: Any) -> Any:
    return section or None


def _v1_distributed(section: Any) -> Any:
    """{} (one process) -> null; its straggler and collectives {} (not measured) -> null; a failed rank's
    "pass" (a Python keyword) -> "pass_name"."""
    if not section:
        return None
    failed = [{("pass_name" if k == "pass" else k): v for k, v in f.items()} for f in section.get("failed_ranks") or []]
    return dict(section, straggler=section.get("straggler") or None, collectives=section.get("collectives") or None,
                failed_ranks=failed)


# v1 section -> v2 section, one entry per section typed in "2"
V1_SECTIONS: dict[str, typing.Callable[[Any], Any]] = {
    "operator_summary": _empty_is_null,
    "python_summary": _empty_is_null,
    "efficiency": _empty_is_null,  # v1's keys are the v2 fields (model.Efficiency)
    "counters": _empty_is_null,  # likewise (model.Counters)
    "distributed": _v1_distributed,
    "threads": _empty_is_null,  # same fields; {} (no sampler, no thread call recorded) is null
}

def _v2_to_v3(data: dict) -> dict:
    """"2" -> "3": a finding's ranking keys leave its evidence for typed fields (model.Finding), and the
    findings merged into it (evidence "also", dicts without a location) become findings at its location."""
    return dict(data, schema_version="3", findings=[_v2_finding(f) for f in data.get("findings") or []])


# the evidence keys "2" ranked and placed findings by, which "3" types (model.Finding, Stake, Place)
V2_STAKE_KEYS = ("time_at_stake_pct", "time_at_stake_basis", "confidence", "confidence_why")
V2_PLACE_KEYS = ("module", "module_class", "library_line")
V2_FINDING_KEYS = ("observation", "doubts", "rule_severity", "severity_basis", "severity_from", "also")
V2_RANKING_KEYS = V2_STAKE_KEYS + V2_PLACE_KEYS + V2_FINDING_KEYS
# "2" marked a ceiling by these words in time_at_stake_basis (findings/stake.py's UPPER_BOUND then)
V2_UPPER_BOUND = "an upper bound"


def _v2_finding(finding: dict) -> dict:
    evidence = dict(finding.get("evidence") or {})
    new = dict(finding, evidence=evidence)
    if any(k in evidence for k in V2_STAKE_KEYS):
        basis = evidence.pop("time_at_stake_basis", None) or ""
        new["stake"] = {"pct": evidence.pop("time_at_stake_pct", None), "basis": basis,
                        "upper_bound": V2_UPPER_BOUND in basis, "confidence": evidence.pop("confidence", None),
                        "confidence_why": evidence.pop("confidence_why", None) or []}
    if any(k in evidence for k in V2_PLACE_KEYS):
        new["place"] = {k: evidence.pop(k, None) for k in V2_PLACE_KEYS}
    # peaks_contended stays, the rule's measurement; the doubt stake.py drew from it in "2" is the rule's in "3"
    new["doubts"] = list(evidence.pop("doubts", None) or []) + (
        [PEAKS_CONTENDED_DOUBT] if evidence.get("peaks_contended") else [])
    for key in ("observation", "rule_severity", "severity_basis", "severity_from"):
        if key in evidence:
            new[key] = evidence.pop(key)
    also = evidence.pop("also", None) or []
    new["also"] = [_v2_finding(dict(a, location=new.get("location"))) for a in also if isinstance(a, dict)]
    return new


def _v3_to_v4(data: dict) -> dict:
    """"3" -> "4": a finding with `doubts` (the tool doubts its own measurement) leaves `findings` for
    `not_confirmed`; the undoubted findings merged into it (`also`) stay findings, at its place in the order,
    and a doubted piece merged into a confirmed finding leaves its `also`. The command that re-measures one is
    its micro-benchmark's reproducer when it has one, else null ("3" did not record it). `verdict` is null:
    a "3" report was not judged healthy or not."""
    findings, doubted = [], []
    for f in data.get("findings") or []:
        also = f.get("also") or []
        kept = [a for a in also if not a.get("doubts")]
        pieces = [dict(a, also=[]) for a in also if a.get("doubts")]
        if f.get("doubts"):
            pieces.insert(0, dict(f, also=[]))
            findings += [dict(a, also=[]) for a in kept]
        else:
            findings.append(dict(f, also=kept))
        doubted += [{"finding": p, "reproduce": _v3_reproduce(p)} for p in pieces]
    return dict(data, schema_version="4", findings=findings, not_confirmed=doubted, verdict=None)


def _v3_reproduce(finding: dict) -> str | None:
    script = (finding.get("evidence") or {}).get("reproducer")
    return f"python {script}" if script else None


# version -> function turning that version's dict into the next version's
MIGRATIONS: dict[str, typing.Callable[[dict], dict]] = {"1": _v1_to_v2, "2": _v2_to_v3, "3": _v3_to_v4}


def to_dict(obj: Any) -> Any:
    """Plain JSON data; a non-finite float (nowhere expected, never fatal) is written as "inf"/"-inf"/"nan"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def dumps(report: Report) -> str:
    data = to_dict(report)
    # schema_version first, as readers look for it
    data = {"schema_version": data.pop("schema_version"), **data}
    return json.dumps(data, indent=1, allow_nan=False, default=str)


def save(report: Report, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(dumps(report))
        fh.write("\n")
    os.replace(tmp, path)


def load(path: str) -> Report:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"no such report: {path}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is not a readable report.json: {exc}") from None
    return from_json_data(data, source=path)


def from_json_data(data: Any, source: str = "report") -> Report:
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UsageError(f"{source} has no schema_version: not a diagnose report")
    version = str(data["schema_version"])
    while version != SCHEMA_VERSION:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            raise UsageError(
                f"{source} has schema_version {version!r}; this diagnose reads {SCHEMA_VERSION!r} "
                "(upgrade diagnose to read newer reports)"
            )
        data = migrate(data)
        version = str(data["schema_version"])
    return _build(Report, data)


def typed(tp: Any, value: Any) -> Any:
    """Plain JSON data (a pass's result) as the model's type `tp`."""
    return _build(tp, value)


def _build(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], value) if len(args) == 1 else value
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        # unknown keys are tolerated: newer minor additions must not break old readers
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in known})
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_build(item, v) for v in value]
    if origin is tuple:  # tuple[X, ...] (frozen specs)
        item = (typing.get_args(tp) or (Any,))[0]
        return tuple(_build(item, v) for v in value)
    if origin is dict:
        _, val = typing.get_args(tp) or (Any, Any)
        return {k: _build(val, v) for k, v in value.items()}
    return value
