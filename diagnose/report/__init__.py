"""The report: typed data only (model.py), and its JSON form (io.py)."""

from diagnose.report.model import (  # noqa: F401
    SCHEMA_VERSION,
    Finding,
    LayerStatus,
    Machine,
    OperatorRow,
    Report,
    Run,
    TargetInfo,
)
from diagnose.report.io import load, save, to_dict  # noqa: F401
