"""The JSON Schema and the field reference generated from the report model (diagnose/report/schema.py)."""

from __future__ import annotations

import copy
import json

import jsonschema_rs
import pytest

from conftest import REPO, report_validator
from diagnose.report import io as report_io
from diagnose.report import schema
from test_report_io import COMMITTED_REPORTS, sample


def test_committed_schema_and_field_reference_are_current():
    # regenerate with: python -m diagnose.report.schema
    assert json.loads((REPO / "docs" / "report.schema.json").read_text()) == schema.json_schema()
    assert (REPO / "docs" / "report-fields.md").read_text() == schema.field_reference()


def test_schema_is_valid_draft_2020_12():
    jsonschema_rs.meta.validate(schema.json_schema())


def test_a_report_validates():
    report_validator().validate(json.loads(report_io.dumps(sample())))


@pytest.mark.parametrize("path", COMMITTED_REPORTS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_committed_report_validates_once_migrated(path):
    report_validator().validate(json.loads(report_io.dumps(report_io.load(str(path)))))


def test_the_schema_rejects_what_the_model_does_not_say():
    good = json.loads(report_io.dumps(sample()))
    validator = report_validator()
    for change in (lambda d: d.update(schema_version="2"),           # an old version is migrated, not valid v3
                   lambda d: d["operators"][0].update(calls=2.5),     # an int field holding a float
                   lambda d: d["operators"][0].update(extra=1),       # a field the model does not have
                   lambda d: d["run"].pop("wall_s"),                  # every field is written
                   lambda d: d["findings"][0].update(severity=None)):  # a str field holding null
        bad = copy.deepcopy(good)
        change(bad)
        with pytest.raises(jsonschema_rs.ValidationError):
            validator.validate(bad)


def test_non_finite_floats_are_written_as_strings_the_schema_accepts():
    report = sample()
    report.run.wall_s = float("inf")
    data = json.loads(report_io.dumps(report))
    assert data["run"]["wall_s"] == "inf"
    report_validator().validate(data)


def test_the_field_reference_names_every_dataclass_and_field():
    text = schema.field_reference()
    for cls in schema._dataclasses():
        assert f"{cls.__name__}" in text
        for name in cls.__dataclass_fields__:
            assert f"| `{name}` |" in text
