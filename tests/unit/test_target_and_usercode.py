"""Target parsing and validation (no user code runs), and the user-code filter."""

from __future__ import annotations

import os
import sysconfig
import types

import pytest

from diagnose.errors import TargetError
from diagnose.target import Target, parse_target_spec, validate
from diagnose.usercode import UserCode


def test_parse_target_spec(tmp_path):
    assert parse_target_spec("model.py:step") == ("model.py", "step")
    assert parse_target_spec("model.py") == ("model.py", None)
    assert parse_target_spec("dir/model.py:not-an-identifier") == ("dir/model.py:not-an-identifier", None)
    odd = tmp_path / "a:b.py"
    odd.write_text("")
    assert parse_target_spec(str(odd)) == (str(odd), None)  # an existing file wins over the split


def test_validate_function_names(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\nfrom x import y as step2\nstep3 = lambda: 1\ndef step():\n    pass\n")
    for name in ("step", "step2", "step3"):
        validate(Target(script=str(path), function=name))
    with pytest.raises(TargetError, match="functions defined there: step"):
        validate(Target(script=str(path), function="nope"))


def test_star_import_defers_to_runtime(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from helpers import *\n")
    validate(Target(script=str(path), function="anything"))


def test_user_code_classification(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    uc = UserCode(str(script), cwd=str(tmp_path))
    assert uc.is_user(str(script))
    assert uc.is_user(str(tmp_path / "helper.py"))
    assert uc.is_user("/somewhere/else/project/model.py")
    assert not uc.is_user(os.__file__)  # standard library
    assert not uc.is_user(os.path.join(sysconfig.get_paths()["purelib"], "torch", "nn", "modules", "linear.py"))
    assert not uc.is_user("<frozen runpy>")
    import diagnose.runner
    assert not uc.is_user(diagnose.runner.__file__)
    assert uc.display(str(tmp_path / "sub" / "m.py")) == os.path.join("sub", "m.py")


def test_script_inside_site_packages_counts_as_user():
    pkg = os.path.join(sysconfig.get_paths()["purelib"], "mypkg")
    uc = UserCode(os.path.join(pkg, "train.py"), cwd="/")
    assert uc.is_user(os.path.join(pkg, "model.py"))
    assert not uc.is_user(os.path.join(sysconfig.get_paths()["purelib"], "torch", "functional.py"))


def test_location_walks_to_the_innermost_user_frame(tmp_path):
    script = tmp_path / "train.py"
    uc = UserCode(str(script), cwd=str(tmp_path))
    code_user = compile("pass", str(script), "exec")
    code_lib = compile("pass", os.__file__, "exec")
    user = types.SimpleNamespace(f_code=code_user, f_lineno=12, f_back=None)
    lib = types.SimpleNamespace(f_code=code_lib, f_lineno=99, f_back=user)
    assert uc.location(lib) == "train.py:12"
    assert uc.location(types.SimpleNamespace(f_code=code_lib, f_lineno=1, f_back=None)) is None
