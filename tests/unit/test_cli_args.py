"""How the command line is split between diagnose and the script (diagnose/cli.py `_split`)."""

from __future__ import annotations

import pytest

from diagnose import cli


def split(*argv: str) -> tuple[list[str], list[str]]:
    return cli._split(cli.build_parser(), list(argv))


@pytest.mark.parametrize("argv, own, script", [
    # like python script.py ARGS: what follows the script is the script's, in order
    (["t.py", "data.csv", "--epochs", "1", "-v"], ["t.py"], ["data.csv", "--epochs", "1", "-v"]),
    # diagnose's own options stay diagnose's wherever they stand, with their values
    (["t.py:step", "--iters", "50", "--warmup=2", "x"], ["t.py:step", "--iters", "50", "--warmup=2"], ["x"]),
    (["-q", "-oout", "t.py", "--lr", "3"], ["-q", "-oout", "t.py"], ["--lr", "3"]),
    (["--vtune", "t.py", "a"], ["--vtune", "t.py"], ["a"]),  # an optional value only when it is a choice
    (["--vtune", "threading", "t.py"], ["--vtune", "threading", "t.py"], []),
    # after -- all is the script's, after what came before it
    (["t.py", "a", "--", "-o", "x", "--", "b"], ["t.py"], ["a", "-o", "x", "--", "b"]),
    # before the script an unknown option is diagnose's, for argparse to reject
    (["--lr", "3", "t.py"], ["--lr", "3"], ["t.py"]),
])
def test_split(argv, own, script):
    assert split(*argv) == (own, script)


def test_unknown_options_before_the_script_are_one_line_errors(capsys):
    assert cli.main(["--lr", "3", "t.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("diagnose: error: unrecognized arguments: --lr") and "\n" not in err


def test_a_subcommand_after_options_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["-q", "threads", "x.py"]) == 2
    assert "the subcommand goes first: diagnose threads [OPTIONS]" in capsys.readouterr().err


@pytest.mark.parametrize("option, needle", [
    (["--max-recorded-calls", "0"], "--max-recorded-calls wants a number of calls >= 1"),
    (["--steps", "0"], "--steps wants a number of steps >= 1"),
    (["--microbench-top", "0"], "--microbench-top wants a count >= 1"),
    (["--sweep-repeats", "0"], "--sweep-repeats wants a number of runs >= 1"),
    (["--trial-rounds", "2"], "--trial-rounds wants a number of rounds >= 3"),
    (["--stall-after", "-1"], "--stall-after wants seconds >= 0"),
    (["--layers", "operators,nope"], "unknown layer(s) nope"),
])
def test_a_bad_option_value_is_a_one_line_usage_error_before_anything_runs(option, needle, tmp_path, capsys):
    target = tmp_path / "t.py"
    target.write_text("import torch\ntorch.ones(1)\n")
    assert cli.main([*option, "-o", str(tmp_path / "r"), str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("diagnose: error: ") and needle in err[0], err
    assert not (tmp_path / "r").exists()  # nothing ran, nothing written


def test_the_config_is_frozen_and_every_default_is_written_once():
    import dataclasses

    from diagnose.config import Config

    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.microbench.budget_s = 0  # type: ignore[misc]
    parser = cli.build_parser()
    defaults = {a.dest: a.default for a in parser._actions}
    assert defaults["microbench.budget_s"] == config.microbench.budget_s
    assert defaults["operators.max_recorded_calls"] == config.operators.max_recorded_calls
    assert defaults["callgraph.node_thres_pct"] == config.callgraph.node_thres_pct
    assert defaults["sweep.repeats"] == config.sweep.repeats
    assert defaults["trials.rounds"] == config.trials.rounds
    # every layer option declared with config.option(...) is a flag, built from the layer registry
    flags = {a.option_strings[0]: a.dest for a in parser._actions if a.option_strings}
    for group, options in cli._option_groups():
        for f in dataclasses.fields(options):
            if "flag" in f.metadata:
                assert flags[f.metadata["flag"]] == f"{group}.{f.name}"
