"""Bad input through the real CLI: one-line errors, meaningful exit codes,
reports written for whatever ran, nothing of the user's overwritten."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil
import pytest
from conftest import DIAGNOSE, REPO, CliRun, assert_one_line_error, run_cli

from diagnose.forkserver import SHARED_ENV

# runner behaviour (exit codes, output directory, argv) shows with the two passes every run has: the
# uninstrumented one and the operator pass. A raising or os._exit target runs every layer: what each
# measured before the failure must be written.
RUNNER_ONLY = ("--layers", "operators")


def test_missing_script(tmp_path):
    run = run_cli(str(tmp_path / "nope.py"), outdir=tmp_path / "r")
    assert_one_line_error(run, 2, "no such file")
    assert not (tmp_path / "r").exists()


def test_directory(tmp_path):
    assert_one_line_error(run_cli(str(tmp_path), outdir=tmp_path / "r"), 2, "is a directory")


def test_syntax_error(script, tmp_path):
    target = script("import torch\nx = (1,\ny = 2\n")
    assert_one_line_error(run_cli(str(target), outdir=tmp_path / "r"), 2, "SyntaxError")


def test_unknown_function(script, tmp_path):
    target = script("def step():\n    pass\n\ndef other():\n    pass\n")
    run = run_cli(f"{target}:nosuchfunc", outdir=tmp_path / "r")
    assert_one_line_error(run, 2, "no top-level function 'nosuchfunc'")
    assert "step" in run.stderr and "other" in run.stderr


def test_unknown_option_before_the_script_is_a_one_line_error(script, tmp_path):
    target = script("print('hi')\n")
    proc = subprocess.run([*DIAGNOSE, "-q", "--lr", "3", str(target)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    run = CliRun(proc.returncode, proc.stdout, proc.stderr, None)
    assert_one_line_error(run, 2, "unrecognized arguments: --lr")
    assert "options meant for the script go after it" in run.stderr


def test_unknown_what_if_variant_is_a_one_line_error(script, tmp_path):
    target = script("print('hi')\n")
    proc = subprocess.run([*DIAGNOSE, "-q", "-o", str(tmp_path / "r"), "--what-if", "compile,fast", str(target)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    run = CliRun(proc.returncode, proc.stdout, proc.stderr, None)
    assert_one_line_error(run, 2, "--what-if wants auto or a comma list of inference_mode")
    assert "not fast" in run.stderr and not (tmp_path / "r").exists()


def test_subcommand_after_options_is_a_one_line_error(script, tmp_path):
    target = script("print('hi')\n")
    proc = subprocess.run([*DIAGNOSE, "-q", "-o", str(tmp_path / "r"), "threads", str(target)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    run = CliRun(proc.returncode, proc.stdout, proc.stderr, None)
    assert_one_line_error(run, 2, "the subcommand goes first: diagnose threads [OPTIONS]")
    assert not (tmp_path / "r").exists()


def test_script_args_pass_through(script, tmp_path):
    target = script("""\
        import sys, json, torch
        torch.ones(2) + 1
        open(sys.argv[0] + '.argv', 'w').write(json.dumps(sys.argv))
        """)
    # like `python target.py ARGS`: positionals and unknown options keep their order ("threads" is the
    # script's argument, not diagnose's subcommand); diagnose's own options among them stay diagnose's;
    # after -- everything is the script's, even -o
    run = run_cli(str(target), "data.csv", "--epochs", "1", "--layers", "operators", "threads", "--lr=3",
                  "--", "-o", "x", outdir=tmp_path / "r")
    assert run.code == 0, run.stderr
    import json
    argv = json.loads((tmp_path / "target.py.argv").read_text())
    assert argv == [str(target), "data.csv", "--epochs", "1", "threads", "--lr=3", "-o", "x"]
    assert run.report["target"]["argv"] == argv[1:]
    assert list(run.report["layers"]) == ["operators"]


def test_script_that_raises_writes_report(script, tmp_path):
    target = script("""\
        import torch
        x = torch.randn(64, 64)
        for _ in range(3):
            x = x @ x.T / 64
        raise ValueError("boom")
        """)
    run = run_cli(str(target), outdir=tmp_path / "r")
    assert run.code == 3, run.stderr
    r = run.report
    assert r["run"]["error"] == "ValueError: boom" and r["run"]["exit_code"] == 1
    assert any("target.py:5" in t for t in r["run"]["traceback"])
    # what ran before the error was still profiled
    assert any(o["name"] == "aten::mm" and o["source"].endswith("target.py:4") for o in r["operators"])
    assert "ValueError: boom" in run.stdout and "ValueError: boom" in run.stderr  # summary + the script's traceback


def test_sys_exit_code_is_reported(script, tmp_path):
    target = script("import sys, torch\ntorch.ones(3).sum()\nsys.exit(3)\n")
    run = run_cli(str(target), *RUNNER_ONLY, outdir=tmp_path / "r")
    assert run.code == 3
    r = run.report
    assert r["run"]["exit_code"] == 3 and "sys.exit(3)" in r["run"]["error"]


def test_sys_exit_zero_is_success(script, tmp_path):
    target = script("import sys, torch\ntorch.ones(3).sum()\nsys.exit(0)\n")
    run = run_cli(str(target), *RUNNER_ONLY, outdir=tmp_path / "r")
    assert run.code == 0 and run.report["run"]["error"] is None


def test_os_exit_keeps_measurements(script, tmp_path):
    target = script("import os, torch\nx = torch.randn(128, 128)\ny = x @ x\nos._exit(4)\n")
    run = run_cli(str(target), outdir=tmp_path / "r")
    assert run.code == 3
    r = run.report
    assert r["run"]["exit_code"] == 4 and "os._exit(4)" in r["run"]["error"]
    assert any(o["name"] == "aten::mm" and o["source"].endswith("target.py:3") for o in r["operators"])


def test_no_torch_operators_said_plainly(script, tmp_path):
    target = script("total = sum(i * i for i in range(1000))\nprint(total)\n")
    run = run_cli(str(target), *RUNNER_ONLY, outdir=tmp_path / "r")
    assert run.code == 0, run.stderr
    r = run.report
    assert r["operators"] == []
    assert r["layers"]["operators"] == {**r["layers"]["operators"], "status": "skipped",
                                        "reason": "the target's main process ran no torch operators"}
    assert "ran no torch operators" in run.stdout
    assert "ran no torch operators" in (tmp_path / "r" / "report.md").read_text()


def test_timeout_keeps_what_was_measured(script, tmp_path):
    target = script("""\
        import torch
        x = torch.randn(64, 64)
        while True:  # no call in the body: not a loop the step detector counts, so only the timeout ends it
            x = x @ x / 64
        """)
    # the timeout covers start-up (importing torch takes seconds on a cold or busy machine)
    run = run_cli(str(target), "--timeout", "8", *RUNNER_ONLY, outdir=tmp_path / "r")
    assert run.code == 3
    r = run.report
    assert r["run"]["timed_out"] and "timed out after 8 s" in r["run"]["error"]
    assert any(o["name"] == "aten::mm" for o in r["operators"])


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_interruption_writes_a_partial_report_and_leaves_no_process(sig, code, script, tmp_path):
    marker = tmp_path / "started"
    target = script(f"""\
        import pathlib, subprocess, sys, torch
        helper = subprocess.Popen([sys.executable, "-c",  # the target's own child (dies quietly on SIGINT)
                                   "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(600)"])
        x = torch.randn(64, 64)
        pathlib.Path({str(marker)!r}).write_text("1")
        while True:  # no call in the body: no loop steps (diagnose/loops.py) to end the script before the signal
            x = x @ x / 64
        """)
    out = tmp_path / "r"
    # started as a shell starts a command: SIGINT at its default. A pytest-xdist worker ignores SIGINT and its
    # children inherit that (Python keeps an inherited SIG_IGN, as `python script.py` does): the Ctrl-C was
    # then never delivered, and diagnose ran on until the test gave up (seen in `make test`'s parallel step)
    # its own fork server, as a user's run has: the pass is then in diagnose's process tree, which the test reads
    own = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
    proc = subprocess.Popen([*DIAGNOSE, "-q", "-o", str(out), str(target)], cwd=REPO, env=own,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    tree = []
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        tree = psutil.Process(proc.pid).children(recursive=True)  # the pass, the sampler, the target's child
        assert len(tree) >= 3, tree
        proc.send_signal(sig)  # to diagnose alone, as `kill` or a CI job's timeout would
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a diagnose running when the test fails
            for p in [psutil.Process(proc.pid), *tree]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
    assert proc.returncode == code, (stdout, stderr)
    assert "Traceback" not in stderr
    import json
    r = json.loads((out / "report.json").read_text())
    assert r["run"]["interrupted"] is True
    assert r["layers"]["operators"]["status"] == "skipped"
    assert "interrupted" in r["layers"]["operators"]["reason"]
    assert "interrupted" in stdout
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]


def test_output_is_an_existing_file(script, tmp_path):
    target = script("import torch\n")
    existing = tmp_path / "precious.txt"
    existing.write_text("mine")
    run = run_cli(str(target), outdir=existing)
    assert_one_line_error(run, 2, "is not a directory")
    assert existing.read_text() == "mine"


def test_output_unwritable(script, tmp_path):
    target = script("import torch\n")
    run = run_cli(str(target), outdir="/proc/diagnose-cannot-write-here")
    assert_one_line_error(run, 2, "cannot write to /proc/diagnose-cannot-write-here")


def test_output_with_earlier_report_needs_force(script, tmp_path):
    target = script("import torch\ntorch.ones(4).sum()\n")
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.json").write_text("earlier")
    (out / "notes.txt").write_text("user file")
    run = run_cli(str(target), *RUNNER_ONLY, outdir=out)
    assert_one_line_error(run, 2, "--force")
    assert (out / "report.json").read_text() == "earlier"
    forced = run_cli(str(target), "--force", *RUNNER_ONLY, outdir=out)
    assert forced.code == 0, forced.stderr
    assert forced.report["schema_version"] == "4"
    assert (out / "notes.txt").read_text() == "user file"


def test_default_output_dir_is_under_reports(script, tmp_path):
    target = script("import torch\ntorch.ones(4).sum()\n")
    run = run_cli(str(target), *RUNNER_ONLY, cwd=tmp_path)
    assert run.code == 0, run.stderr
    dirs = list((tmp_path / "reports").iterdir())
    assert len(dirs) == 1 and dirs[0].name.startswith("target-")
    assert (dirs[0] / "report.json").is_file()
