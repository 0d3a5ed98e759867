"""Where an operator finding happens beyond the user's line: the module and the library line.

Every finding about an operator at given input shapes (evidence
`input_shapes`) is matched with its operator row, and gets a `place`
(model.Place): `module` (the module path, instances' differing indices as
`*`), `module_class` and `library_line` (the innermost frame outside torch
that ran it, e.g. `transformers/models/bert/modeling_bert.py:335`, when it is
not one of the row's own user lines: OperatorRow.library_elsewhere), and its
title says them. In a module whose class is
an attention implementation that runs softmax(QK^T)V as separate operators,
the suggestion names the fused kernel to switch to.
"""

from __future__ import annotations

import re

from diagnose.report.model import Finding, OperatorRow, Place, Report

ATTENTION_CLASS = re.compile(r"attention|attn", re.IGNORECASE)
UNFUSED_ATTENTION_OPS = re.compile(r"^aten::(_?softmax|bmm|matmul|baddbmm|_softmax_backward_data|masked_fill\w*)$")
SDPA_SUGGESTION = (
    "{cls} runs attention as separate matmul and softmax operators: use a fused kernel, "
    "torch.nn.functional.scaled_dot_product_attention in your own module, or for a transformers model "
    "attn_implementation=\"sdpa\" when building it (from_pretrained / from_config)."
)


def _row(report: Report, op: str | None, shapes) -> OperatorRow | None:
    if op is None or shapes is None:
        return None
    return next((r for r in report.operators if r.name == op and r.input_shapes == shapes), None)


def annotate(finding: Finding, report: Report) -> Finding:
    row = _row(report, finding.op, finding.evidence.get("input_shapes"))
    if row is None or not row.modules:
        return finding
    where, library = row.where_module(), row.library_elsewhere()
    finding.place = Place(module=where, module_class=row.module_class, library_line=library)
    parts = [p for p in (f"in {where}" if where else None, library) if p]
    if parts:
        finding.title += f" ({'; '.join(parts)})"
    cls = row.module_class or ""
    if ATTENTION_CLASS.search(cls) and UNFUSED_ATTENTION_OPS.match(row.name) \
            and "scaled_dot_product" not in finding.suggestion:
        finding.suggestion = SDPA_SUGGESTION.format(cls=cls) + " " + finding.suggestion
    return finding
