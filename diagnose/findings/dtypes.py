"""Rule on the operators' dtypes: dtype (a model that runs in float64).

- dtype: operators whose tensor inputs are float64 (the profiler's "double";
  0-d doubles are Python scalars, not counted) take >= MIN_PCT (10%) of
  operator self CPU time: the same threshold as a hot operator's, since the
  cause is one change for all of them. `high` from HIGH_PCT (30%), else
  `medium`; both lines judged on the share's interval from the run's noise
  (report/borderline.py, `graded`), so a share straddling 10% is `low`,
  borderline, and the float32 what-if runs for it too. It points at the
  user line where the float64 comes from
  (report.operator_summary.float64_origins, the operator pass's record of
  the calls that made float64 from something that was not):
  `torch.set_default_dtype(torch.float64)` first, then a model's
  parameters cast (`.double()`), then the origin that made the most float64
  bytes (`torch.from_numpy` of a float64 array, `dtype=torch.float64`).
  Its stake: what `--what-if float32` measured on the user's steps when that
  variant ran (1 - 1/speedup, its outputs matching: the what_if finding for
  float32 is then this one), else half of the float64 operators' time, an
  estimate (float32 runs twice the SIMD lanes and moves half the bytes:
  2x on the GEMMs of examples/float64_train.py, measured on one thread of
  an AMD EPYC).
"""

from __future__ import annotations

from diagnose.findings.stake import measured as measured_stake, operator_stake
from diagnose.opkinds import tensor_dtypes
from diagnose.report import borderline
from diagnose.report.model import Borderline, Finding, Float64Origin, Report, Stake

MIN_PCT = 10.0
HIGH_PCT = 30.0
FLOAT32_VARIANT = "float32"  # the what-if variant that measures the fix (whatif/variants.py)
FIX = {
    ".double()": "drop the `.double()` (or use `.float()`)",
    ".to(torch.float64)": "convert to torch.float32 instead",
    ".type(torch.float64)": "convert to torch.float32 instead",
    "torch.set_default_dtype(torch.float64)": "remove it (float32 is torch's default)",
    "torch.from_numpy of a float64 array": "add `.float()` (or make the array float32: `a.astype(np.float32)`)",
}


def float64_pct(report: Report) -> float:
    """The share (%) of operator self CPU time in operators whose tensor inputs are float64."""
    return sum(r.self_pct for r in report.operators if "double" in tensor_dtypes(r.input_shapes, r.dtypes))


def origins(report: Report) -> list[Float64Origin]:
    """Where the float64 came from, the cause first (module docstring)."""
    found = report.operator_summary.float64_origins if report.operator_summary else []
    return sorted(found, key=lambda o: (o.how != "torch.set_default_dtype(torch.float64)", o.parameters == 0,
                                        o.source is None, -o.bytes))


def fix(origin: Float64Origin) -> str:
    how = origin.how
    text = FIX.get(how) or ("use dtype=torch.float32" if "dtype=" in how else "make it float32")
    return f"{how} at {origin.source or 'an unknown line'}: {text}"


def float32_trial(report: Report):
    """The float32 what-if variant's row, when it ran."""
    if report.what_if is None:
        return None
    return next((v for v in report.what_if.variants if v.name == FLOAT32_VARIANT), None)


def graded(report: Report) -> tuple[float, str | None, Borderline | None]:
    """(float64's share of operator time, its severity, borderline) against MIN_PCT and HIGH_PCT, judged on the
    share's interval from this run's noise (report/borderline.py); severity None: the whole interval is under
    MIN_PCT (no finding, and no float32 what-if)."""
    pct = float64_pct(report)
    severity, border = borderline.grade(pct, borderline.noise(report), ((HIGH_PCT, "high"), (MIN_PCT, "medium")),
                                        "float64 share of operator CPU time")
    return pct, severity, border


def dtype(report: Report) -> list[Finding]:
    pct, severity, border = graded(report)
    if severity is None:
        return []
    causes = origins(report)
    top = causes[0] if causes else None
    rows = [r for r in report.operators if "double" in tensor_dtypes(r.input_shapes, r.dtypes)][:5]
    where = f", from {top.how} at {top.source}" if top and top.source else ""
    variant = float32_trial(report)
    evidence = {
        "float64_share_pct": round(pct, 2),
        "threshold_pct": HIGH_PCT if severity == "high" else MIN_PCT,
        "top_operators": [{"op": r.name, "input_shapes": r.input_shapes, "share_pct": r.self_pct, "source": r.source}
                          for r in rows],
        "origins": [{"source": o.source, "how": o.how, "calls": o.calls, "bytes": o.bytes,
                     "parameters": o.parameters} for o in causes[:5]],
    }
    changes = "; ".join(fix(o) for o in causes[:3] if o.source) or (
        "find where the float64 tensors are made (a `.double()`, numpy arrays, `dtype=torch.float64`)")
    suggestion = (f"Run the model in float32 unless you need float64's precision: {changes}. float32 computes twice "
                  "the SIMD lanes and moves half the bytes.")
    if variant is not None and variant.trial.verdict == "win" and variant.outputs.status == "match":
        t = variant.trial
        # judged on the trial's interval, as every measured stake is (stake.measured)
        stake = measured_stake(t, f"measured: 1 - 1/speedup of the step with the model in float32 "
                                  f"(--what-if float32), {t.rounds} interleaved rounds on your steps")
        suggestion += (f" Measured on your steps: {t.speedup:.2f}x faster (95% interval {t.ci_low:.2f}-"
                       f"{t.ci_high:.2f}x), outputs within {variant.outputs.rel_diff:.2g} of their scale "
                       f"(tolerance {variant.outputs.tolerance:g}).")
    else:
        half = operator_stake(report, pct / 2)
        if variant is None:
            measured = "`--what-if float32` measures it"
            suggestion += " `diagnose --what-if float32` measures it on your steps."
        else:
            t, out = variant.trial, variant.outputs
            measured = (f"--what-if float32 measured {t.speedup:.2f}x, {t.verdict} against a noise floor of "
                        f"{t.noise_floor_pct:.0f}%" if t.speedup else f"--what-if float32: {t.verdict}")
            measured += f", outputs {out.status}" + (f" ({out.reason})" if out.reason else "")
            suggestion += f" On your steps {measured}."
        stake = Stake(pct=half.pct, basis=(f"half the float64 operators' time (float32 runs them about twice as "
                                           f"fast; {measured}): {half.basis}"))
    if variant is not None:
        t = variant.trial
        evidence["float32"] = {"verdict": t.verdict, "speedup": t.speedup, "ci_low": t.ci_low, "ci_high": t.ci_high,
                               "outputs": variant.outputs.status, "rel_diff": variant.outputs.rel_diff,
                               "tolerance": variant.outputs.tolerance}
    return [Finding(
        kind="dtype",
        severity=severity,
        borderline=border,
        title=f"float64 operators take {pct:.0f}% of operator CPU time: the model runs in float64{where}",
        op=None,
        location=top.source if top else None,
        evidence=evidence,
        suggestion=suggestion,
        layer="operators",
        stake=stake,
    )]
