"""Shared helpers: run the real `diagnose` CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Bytecode: where the environment asks Python not to write it (PYTHONDONTWRITEBYTECODE, as this project's sessions
# run), every process of the suite compiled diagnose from source again: each `python -m diagnose` run (about 0.5 s
# of its start), each fresh interpreter a trial or a torchrun rank starts, and each pytest process compiling the
# test modules (about 4 of its 10 s of collection). The suite writes it, in the __pycache__ directories git ignores.
# Not under a PYTHONPYCACHEPREFIX: Python then reads no __pycache__ at all, and the installed torch's, which pip
# compiled, was compiled again into the prefix by the first processes of every fresh clone (cc149: the parallel
# step no faster)
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    sys.dont_write_bytecode = False

from diagnose.config import DEFAULT_LAYERS, FIRST_TRIAL_ROUNDS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The machine's probed peaks (diagnose/layers/efficiency/probe.py) go to a cache of the suite's own, not the
# developer's ~/.cache/diagnose: a probe the suite measured, between its own runs, was what their next report read
# (a 2-thread GEMM peak of 132.5 GFLOP/s that a micro-benchmarked mm then beat). Kept between runs (a probe is some
# 3 s); a fresh clone probes once. Set here, at import, so every diagnose run and fork server the tests start has it.
os.environ.setdefault("DIAGNOSE_CACHE_DIR", str(REPO / ".pytest_cache" / "diagnose-probe"))
EXAMPLES = REPO / "examples"
DIAGNOSE = [sys.executable, "-m", "diagnose"]
# every default layer but the doctor: for fixtures whose workloads' page faults sit near the check's 5% line,
# where the allocator trials (fresh interpreters, up to nine rounds) would start or not from run to run
NO_DOCTOR = ",".join(layer for layer in DEFAULT_LAYERS if layer != "doctor")

# Tests whose assertions do not depend on how busy the CPUs are: `make test` runs them two at a time
# (pytest-xdist, `-m parallel_safe -n 2`) and everything else alone, after them. Findings about threads,
# trials, sweeps, micro-benchmarks, rooflines and the planted examples measure this machine and stay serial. The
# doctor's, the what-if's and the HTML page's assertions would hold beside another test (every trial's verdict is
# checked against its own numbers; the page's first finding is the first about the workload), but their passes
# are fresh interpreters, compilations and a browser that a neighbour slows 2-3x: in the parallel step they took
# 618 s of its work (the two compile what-ifs 102 s and 71 s, 31 s and 33 s alone) where the serial step spent
# 286 s on them, and the suite took longer (a fresh clone, 2026-11-28), so they stay serial. A test of a serial
# file whose assertions are structural (attribution, files, notes, exit codes) carries
# @pytest.mark.parallel_safe itself.
PARALLEL_SAFE = {"unit", "test_bad_input.py", "test_faults.py", "test_report.py", "test_compare_cli.py",
                 "test_vtune_cli.py", "test_microbench_cli.py", "test_steps_cli.py", "test_processes.py",
                 "test_compat.py", "test_memory_cli.py"}


# One fork server per test process (diagnose/forkserver.py, SHARED_ENV): every diagnose run the tests start with
# this process's environment forks its passes from it instead of importing torch again (about 4 s of CPU a run,
# some 150 runs). A run with another environment (a test's env=) starts its own, as a user's run does, and so
# does every run when DIAGNOSE_TEST_OWN_SERVERS=1. The server compares whole environments, and pytest names
# the running test in PYTEST_CURRENT_TEST: the hooks below keep it out of the environment while fixtures and
# tests run (pytest sets it again at each phase and removes it after the teardown).
OWN_SERVERS = "DIAGNOSE_TEST_OWN_SERVERS"


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    yield


@pytest.fixture(scope="session", autouse=True)
def shared_fork_server(tmp_path_factory):
    from diagnose.forkserver import SHARED_ENV, ForkServer

    if os.environ.get(OWN_SERVERS) or os.environ.get(SHARED_ENV):
        yield None
        return
    path = str(tmp_path_factory.mktemp("forkserver") / "sock")
    os.environ[SHARED_ENV] = path  # first: the server's environment is the runs'
    # a session fixture's setup runs outside this conftest's hooks (they are scoped to tests/): pop it here
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    server = ForkServer.start(listen=path)
    if server is None:
        del os.environ[SHARED_ENV]
    yield server
    if server is not None:
        server.close()
        os.environ.pop(SHARED_ENV, None)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if (path.name in PARALLEL_SAFE or path.parent.name in PARALLEL_SAFE) and not item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.parallel_safe)


@dataclass
class CliRun:
    code: int
    stdout: str
    stderr: str
    outdir: Path | None
    tool_hang_expected: bool = False  # the test plants a hang diagnose's instrumentation causes (test_faults.py)
    validated: bool = field(default=False, init=False, repr=False)

    @property
    def report(self) -> dict:
        """report.json, validated against the JSON Schema generated from the model (docs/report.schema.json) at
        its first reading (once: a module fixture's run is read by each of its tests), and
        parsed afresh at each, so that no test sees another's changes to it. A pass that hung under diagnose's own
        instrumentation (a `hang` finding, tool_induced) fails every test that did not plant one: the report
        blames diagnose then, rightly, and a test that reads only its other layers would pass over the defect (a
        fork Pool's worker outlived Pool.terminate() that way in 2 of 3 clean-clone runs, children.wake_main)."""
        data = json.loads((self.outdir / "report.json").read_text())
        if not self.validated:
            assert_valid_report(data)
            self.validated = True
        if not self.tool_hang_expected:
            ours = [g["title"] for f in data["findings"] for g in (f, *f.get("also", []))
                    if g["kind"] == "hang" and g["evidence"].get("tool_induced")]
            assert not ours, ours
        return data


_VALIDATOR = []


def assert_valid_report(data: dict) -> None:
    """report.json against docs/report.schema.json; a failure names each offending field and why."""
    problems = sorted({f"{'/'.join(map(str, e.instance_path)) or '(top)'}: {e.message[:160]}"
                       for e in report_validator().iter_errors(data)})
    assert not problems, "report.json does not match docs/report.schema.json:\n" + "\n".join(problems[:20])


def report_validator():
    """One compiled validator of docs/report.schema.json (jsonschema-rs, draft 2020-12), the schema itself
    checked against the draft's meta-schema first."""
    if not _VALIDATOR:
        import jsonschema_rs

        schema = json.loads((REPO / "docs" / "report.schema.json").read_text())
        jsonschema_rs.meta.validate(schema)
        _VALIDATOR.append(jsonschema_rs.Draft202012Validator(schema))
    return _VALIDATOR[0]


def run_cli(*args: str, cwd: Path | None = None, outdir: Path | None = None, timeout: float = 240,
            env: dict[str, str] | None = None, tool_hang_expected: bool = False) -> CliRun:
    """`diagnose -q [-o OUTDIR] ARGS`; a leading subcommand (e.g. callgraph) stays first.

    Micro-benchmarks are off (--microbench-budget 0) unless ARGS name a --microbench option. Trials stop at their
    first rounds (--trial-rounds 3) unless ARGS name --trial-rounds: no e2e test reads the run-on (the unit tests of
    doctor/trials.py do), and on a shared machine it ran on exactly when the machine was noisy, which made one test
    take 21 s in one clean clone and 61 s in the next (the compile what-if of examples/pointwise_block.py).
    """
    args = list(args)
    sub = [args.pop(0)] if args and args[0] in ("callgraph", "threads") else []
    cmd = [*DIAGNOSE, *sub, "-q"]
    if not any(a.startswith("--microbench") for a in args):  # ~5-15 s per run; its own tests turn it on
        cmd += ["--microbench-budget", "0"]
    if "--trial-rounds" not in args:
        cmd += ["--trial-rounds", str(FIRST_TRIAL_ROUNDS)]
    if outdir is not None:
        cmd += ["-o", str(outdir)]
    cmd += args
    proc = subprocess.run(cmd, cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout, env=env)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, outdir, tool_hang_expected)


def line_of(path: Path, needle: str) -> int:
    """1-based line number of the first line containing needle."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


@pytest.fixture
def script(tmp_path):
    """Write a script into tmp_path and return its path."""

    def make(source: str, name: str = "target.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return make


def assert_one_line_error(run: CliRun, code: int, needle: str) -> None:
    assert run.code == code, (run.code, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    lines = [l for l in run.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("diagnose: error: "), lines[0]
    assert needle in lines[0], lines[0]


os.environ.setdefault("PYTHONWARNINGS", "ignore")
# nothing is ever downloaded (the transformers examples build their models from configs); set for every run, so
# that the real-model runs share the test process's fork server (shared_fork_server) like the others
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def trial_could_win(t: dict) -> bool:
    """doctor/trials.could_win on a report's trial: "no gain" with no structural reason whose interval still
    reaches over MIN_SPEEDUP (it did not show the change gains nothing)."""
    from diagnose.doctor.trials import MIN_SPEEDUP

    return (t["verdict"] == "no gain" and t.get("no_effect") is None and t.get("ci_high") is not None
            and t["ci_high"] > MIN_SPEEDUP)


def doctor_finding_expected(tried: list[dict]) -> bool:
    """Whether findings/doctor.py makes a finding of a warned check from its trials `tried`: one of them won, or
    none ruled a gain out (no gain with a tight interval, or slower) and one could not tell."""
    if any(t["verdict"] == "win" for t in tried):
        return True
    measured = [t for t in tried if t["verdict"] in ("no gain", "slower")]
    return bool(measured) and all(trial_could_win(t) for t in measured)


def assert_trial_follows_the_rule(t: dict) -> None:
    """A trial's verdict is what diagnose/doctor/trials.py makes of the numbers the report shows: a structural
    no_effect first (then "no gain"); else, judged on its first rounds ("pooled"), a win (slower) only with its
    interval above (below) 1x and its speedup beyond the noise floor NOISE_MARGIN times over and MIN_SPEEDUP; run
    on to EXTENDED_ROUNDS ("rounds"), a win (slower) only with its median round beyond MIN_SPEEDUP and its sign-test
    interval above (below) 1x (each number rounded as stored). Holds whatever this machine measured."""
    from diagnose.doctor.trials import EXTENDED_ROUNDS, MIN_SPEEDUP, NOISE_MARGIN, ROUNDS

    assert (t["rounds"], t["method"]) in ((ROUNDS, "pooled"), (EXTENDED_ROUNDS, "rounds")) or t["verdict"] in (
        "failed", "skipped"), t
    assert not t["capped"] or (t["rounds"], t["method"]) == (ROUNDS, "pooled"), t  # --trial-rounds kept it there
    if t["no_effect"] is not None:
        assert t["verdict"] == "no gain" and t["method"] == "pooled", t  # a structural truth is never run on
        return
    beyond = MIN_SPEEDUP
    if t["method"] == "pooled":
        beyond = max(beyond, (1 + t["noise_floor_pct"] / 100) ** NOISE_MARGIN)
    beyond -= 0.003  # the rounding of the stored numbers
    if t["verdict"] == "win":
        assert t["speedup"] > beyond and (t["ci_low"] is None or t["ci_low"] >= 1.0), t
    elif t["verdict"] == "slower":
        assert 1 / t["speedup"] > beyond and (t["ci_high"] is None or t["ci_high"] <= 1.0), t
    else:
        assert t["verdict"] in ("no gain", "failed", "skipped"), t


def workload_findings(findings: list[dict]) -> list[dict]:
    """The findings about the workload: without those about the shared machine (findings/verdict.MACHINE_KINDS:
    other processes holding the CPUs, which a neighbour's load makes in any run, and ranks by its wait share)."""
    from diagnose.findings.verdict import MACHINE_KINDS

    return [f for f in findings if f["kind"] not in MACHINE_KINDS]


def first_workload_finding(findings: list[dict]) -> tuple[int, dict]:
    """(index, finding) of the first finding about the workload; every finding before it is about the machine."""
    from diagnose.findings.verdict import MACHINE_KINDS

    i, f = next((i, f) for i, f in enumerate(findings) if f["kind"] not in MACHINE_KINDS)
    assert all(g["kind"] in MACHINE_KINDS for g in findings[:i]), findings[:i + 1]
    return i, f


def expected_stake(f: dict) -> float:
    """The rank's measure of a finding in report.json: time at stake x its confidence (findings/stake.py
    expected)."""
    return (f["stake"]["pct"] or 0.0) * f["stake"]["confidence"]


def rule_findings(report: dict, rule) -> list:
    """What `rule` (a findings function: Report -> list[Finding]) makes of the report's own numbers, loaded back:
    the test of a measured verdict that holds on any machine (the report's finding follows from its numbers)."""
    from diagnose.report import io as report_io

    return rule(report_io.from_json_data(report))
