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


def test_the_children_of_a_run_that_went_away_are_killed(shared):
    """A diagnose killed while its pass runs leaves no pass behind on the shared server (one spun on for the rest
    of a suite when its test failed before stopping it)."""
    import time

    orphan = textwrap.dedent("""
        import os
        from diagnose.forkserver import ForkServer
        server = ForkServer.start()
        child = server.spawn(None, ["-n", "1", "-r", "1", "import time; time.sleep(600)"], module="timeit",
                             log=os.devnull, stdin_null=True)
        print(child.pid, flush=True)
        os._exit(0)  # gone without a word, as a SIGKILL leaves it
    """)
    out = subprocess.run([sys.executable, "-c", orphan], capture_output=True, text=True, env=shared, timeout=120)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            with open(f"/proc/{pid}/stat") as fh:  # reaped by the server soon after; a zombie meanwhile
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (FileNotFoundError, ProcessLookupError):  # reaped between the kill(0) above and the open (ENOENT)
            return  # or the read (ESRCH): gone
        time.sleep(0.1)
    pytest.fail(f"pid {pid} still runs 10 s after its requester went away")


def test_what_torchs_import_sets_in_a_run_is_no_difference(shared):
    """torch's import sets TORCHINDUCTOR_CACHE_DIR (in the server, and in a test process that imported torch)."""
    import torch._dynamo  # noqa: F401 - sets it here, if torch sets it at all

    env = {**shared, **{k: v for k, v in os.environ.items() if k == "TORCHINDUCTOR_CACHE_DIR"}}
    assert _ask(env)[0] == "shared"
