"""The JSON Schema of report.json and the field reference, both generated from the typed model.

The dataclasses of diagnose/report/model.py are the one place the report's
fields are named; this module reads them (type hints for the types, the
comments beside each field and the class docstrings for the meanings) and
writes:
- `json_schema()`: a JSON Schema (draft 2020-12) of report.json. Every field is
  written by `io.to_dict`, so every property is required, and nothing else is
  (`additionalProperties: false`). A float may also be written as "inf", "-inf"
  or "nan" (io.to_dict never writes a non-finite JSON number).
- `field_reference()`: docs/report-fields.md, one table per dataclass.

`python -m diagnose.report.schema` rewrites docs/report.schema.json and
docs/report-fields.md; tests/unit/test_report_schema.py fails when either is
out of date, and validates real reports against the schema.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io as _io
import json
import os
import sys
import tokenize
import types
import typing
from typing import Any

from diagnose.report.model import SCHEMA_VERSION, Report

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")
SCHEMA_FILE = os.path.join(DOCS, "report.schema.json")
FIELDS_FILE = os.path.join(DOCS, "report-fields.md")

_FLOAT = {"$ref": "#/$defs/float"}
_FLOAT_DEF = {"description": "a number; a non-finite one is written as a string",
              "anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}]}


def _dataclasses(root: type = Report) -> list[type]:
    """Every dataclass reachable from `root`, in the order first met (depth first)."""
    seen: list[type] = []

    def visit(tp: Any) -> None:
        if dataclasses.is_dataclass(tp):
            if tp in seen:
                return
            seen.append(tp)
            for hint in typing.get_type_hints(tp).values():
                visit(hint)
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return seen


@functools.cache
def _module_source(module: str) -> tuple[dict[str, ast.ClassDef], dict[int, tuple[str, bool]]]:
    """A module's top-level classes by name, and its comments by line: (comment, the line holds nothing else).

    Parsed once a module: inspect.getsource parses the whole module again for every class (4 s a schema)."""
    source = inspect.getsource(sys.modules[module])
    by_line: dict[int, tuple[str, bool]] = {}
    for tok in tokenize.generate_tokens(_io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            alone = not tok.line[:tok.start[1]].strip()
            by_line[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    classes = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
    return classes, by_line


def _comments(cls: type) -> dict[str, str]:
    """field name -> its comment: the comment on its line, else the full-line comments right above it."""
    classes, by_line = _module_source(cls.__module__)
    node = classes[cls.__qualname__]
    out: dict[str, str] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        parts = []
        line = stmt.lineno - 1
        while line in by_line and by_line[line][1]:
            parts.insert(0, by_line[line][0])
            line -= 1
        # a comment beside the field, possibly continued on the lines after it (inside the default's brackets)
        for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
            if n in by_line and not by_line[n][1]:
                parts.append(by_line[n][0])
        out[stmt.target.id] = " ".join(parts)
    return out


def _doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    # dataclasses invent a signature docstring for classes without one
    return "" if doc.startswith(f"{cls.__name__}(") else " ".join(doc.split())


def _type_schema(tp: Any) -> dict[str, Any]:
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return _FLOAT
    if tp is str:
        return {"type": "string"}
    if dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a) for a in args]}
    if origin in (list, tuple):
        items = args[0] if args else Any
        return {"type": "array", "items": _type_schema(items)}
    if origin is dict:
        value = args[1] if args else Any
        return {"type": "object", "additionalProperties": _type_schema(value)}
    raise TypeError(f"report model: no JSON Schema for type {tp!r}")


def _class_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        prop = dict(_type_schema(hints[f.name]))
        if comments.get(f.name):
            prop = {"description": comments[f.name], **prop} if "$ref" not in prop else {
                "description": comments[f.name], "allOf": [prop]}
        props[f.name] = prop
    schema: dict[str, Any] = {"type": "object"}
    if _doc(cls):
        schema["description"] = _doc(cls)
    schema.update(properties=props, required=[f.name for f in dataclasses.fields(cls)], additionalProperties=False)
    return schema


def json_schema() -> dict[str, Any]:
    classes = _dataclasses()
    defs = {"float": _FLOAT_DEF, **{c.__name__: _class_schema(c) for c in classes if c is not Report}}
    top = _class_schema(Report)
    top["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://diagnose.invalid/report-v{SCHEMA_VERSION}.schema.json",
            "title": f"diagnose report.json, schema_version {SCHEMA_VERSION}",
            "description": "Generated from diagnose/report/model.py by diagnose/report/schema.py; "
                           "meanings and units: docs/report.md and docs/report-fields.md.",
            **top, "$defs": defs}


def _type_name(tp: Any) -> str:
    if tp is Any:
        return "any"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    names = {bool: "bool", int: "int", float: "float", str: "string"}
    if tp in names:
        return names[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin in (list, tuple):
        return f"list of {_type_name(args[0]) if args else 'any'}"
    if origin is dict:
        return f"map of {_type_name(args[1]) if args else 'any'}"
    return str(tp)


def field_reference() -> str:
    out = [f"# report.json field by field (schema_version {SCHEMA_VERSION})", "",
           "Generated from `diagnose/report/model.py` by `python -m diagnose.report.schema`; do not edit by hand.",
           "What the sections are for, the finding kinds and the exit codes: [report.md](report.md). "
           "The JSON Schema: [report.schema.json](report.schema.json).", "",
           "Units live in the names: `_us` microseconds, `_s` seconds, `_pct` percent (0-100), "
           "`_share` a fraction (0-1), `_bytes` bytes. Every field is always written; "
           "`or null` marks what may be null.", ""]
    for cls in _dataclasses():
        hints = typing.get_type_hints(cls)
        comments = _comments(cls)
        name = cls.__name__
        out += ["## Report (the top level)" if cls is Report else f'## <a id="{name.lower()}"></a>{name}', ""]
        if _doc(cls):
            out += [_doc(cls), ""]
        out += ["| field | type | meaning |", "| --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            meaning = comments.get(f.name, "").replace("|", "\\|")
            out.append(f"| `{f.name}` | {_type_name(hints[f.name]).replace('|', '/')} | {meaning} |")
        out.append("")
    return "\n".join(out)


def write() -> None:
    with open(SCHEMA_FILE, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(json_schema(), indent=1) + "\n")
    with open(FIELDS_FILE, "w", encoding="utf-8") as fh:
        fh.write(field_reference())


if __name__ == "__main__":
    write()
    print(f"wrote {SCHEMA_FILE} and {FIELDS_FILE}", file=sys.stderr)
