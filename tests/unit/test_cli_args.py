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
