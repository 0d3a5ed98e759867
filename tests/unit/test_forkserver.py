"""The fork server shared by many runs (diagnose/forkserver.py, SHARED_ENV): a run with the server's interpreter
and environment forks from it, its child writing to the run's own stdout; a run with another environment starts
a server of its own. (The suite's diagnose runs go through the shared server: tests/conftest.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from diagnose.forkserver import SHARED_ENV

# a run: asks for a child that prints its arguments (builtins.print called with the args list) to our stdout
ASK = textwrap.dedent("""
    import sys
    from diagnose.forkserver import ForkServer
    server = ForkServer.start()
    print("shared" if server.proc is None else "own", flush=True)
    child = server.spawn("builtins:print", ["from the child"], log=None, stdin_null=True)
    print("exit", child.wait(timeout=60), flush=True)
    server.close()
""")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fs") / "sock")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env[SHARED_ENV] = path
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from diagnose.forkserver import ForkServer
        server = ForkServer.start(listen={path!r})
        print("ready" if server else "failed", flush=True)
        sys.stdin.read()  # until the test closes our stdin
        server.close()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert starter.stdout.readline().strip() == "ready"
    yield env
    starter.stdin.close()
    assert starter.wait(timeout=30) == 0
    assert not os.path.exists(path)  # the server ended with its starter and removed its socket


def _ask(env: dict[str, str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_run_with_the_servers_environment_forks_from_it_writing_to_its_own_stdout(shared):
    assert _ask(shared) == ["shared", "['from the child']", "exit 0"]


def test_a_run_with_another_environment_starts_its_own_server(shared):
    assert _ask({**shared, "ANOTHER": "1"}) == ["own", "['from the child']", "exit 0"]


ASKS_WHICH = "from diagnose.forkserver import ForkServer; print('shared' if ForkServer.start().proc is None else 'own')"


@pytest.fixture(scope="module")
def asked_in_a_fixture():
    return subprocess.run([sys.executable, "-c", ASKS_WHICH], capture_output=True, text=True, timeout=120).stdout


def test_the_suites_runs_share_the_test_process_server_from_tests_and_fixtures(asked_in_a_fixture):
    """tests/conftest.py's shared_fork_server, with PYTEST_CURRENT_TEST kept out of the environment in both."""
    if os.environ.get("DIAGNOSE_TEST_OWN_SERVERS"):
        pytest.skip("DIAGNOSE_TEST_OWN_SERVERS=1: every run starts its own server")
    asked_in_the_test = subprocess.run([sys.executable, "-c", ASKS_WHICH], capture_output=True, text=True,
                                       timeout=120).stdout
    assert (asked_in_a_fixture.strip(), asked_in_the_test.strip()) == ("shared", "shared")
