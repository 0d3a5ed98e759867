"""A fork server for the passes: torch imported once, each pass a fork of it.

Every pass used to be a fresh `python -m diagnose.runner`, and each paid for
the interpreter's start and for importing torch, torch._dynamo and
torch.profiler (about 4 s on this project's 2-CPU machines, more than the
whole measured window of most scripts). The server imports them once and
forks a child per request; the child is what `python -m diagnose.runner
SPEC` would have been, in a session of its own, with its output in a log
file (or the terminal) and the request's working directory.

What a forked child cannot have is a different environment at library load
time: OMP_NUM_THREADS, MKL_*, KMP_*, LD_PRELOAD and MALLOC_CONF are read when
torch's libraries are loaded. So only requests with the server's own
environment come here; sweep points (which pin OMP_NUM_THREADS), torchrun
passes and passes under a command prefix (vtune) are started fresh
(diagnose/launch.py decides). The server never runs a torch operator itself:
an OpenMP pool started before a fork does not work in the child.

Protocol, one JSON object per line over a Unix socket: the server says
{"ready": true, "executable": ..., "env": {...}, "set_by_imports": {...}}
once imported; a request
{"call": "module:function" (called with the args) or "module": NAME (run as
`python -m NAME`), "args": [...], "cwd": DIR, "log": FILE or null (stdout and
stderr; null: the requester's own), "stdout": FILE or null (stdout apart),
"stdin_null": bool} carries the requester's stdin, stdout and stderr as
file descriptors (SCM_RIGHTS), and is answered {"pid": PID};
{"pid": PID, "status": WAITSTATUS} follows when that child ends. When a
requester's connection closes, the children it asked for that still run are
killed (their process groups); the server kills all of them and exits when
the socket it was started with closes.

A shared server (`DIAGNOSE_FORK_SERVER=PATH`, SHARED_ENV) also listens on the
Unix socket PATH, so that many diagnose runs in a row (a test suite, a CI job
diagnosing several scripts) pay for importing torch once: each run that finds
the variable connects instead of starting its own, and uses the server only
when the server's interpreter and environment are exactly its own (set the
variable before starting the server), apart from what the server's imports
set to the same values: the environment is read when torch's libraries
load, and a child keeps the server's. Otherwise the run starts
its own server, as without the variable. Each child gets the requester's
working directory and standard streams, and its exit goes to the requester
alone.

    python -m diagnose.forkserver FD [PATH]
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from typing import Any

READY_TIMEOUT_S = 120.0
# what every pass imports before its clock starts (diagnose/runner.py)
PRELOAD = ("torch", "torch._dynamo", "torch.profiler", "diagnose.runner")
SHARED_ENV = "DIAGNOSE_FORK_SERVER"  # the Unix socket of a server shared by many runs (module docstring)
STDIO = 3  # the requester's stdin, stdout and stderr travel with each request


# ---------------------------------------------------------------- server side


class _Client:
    """One connection: its unread bytes, the descriptors that came with them."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.fds: list[int] = []

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:  # it went away: its children are still reaped
            pass


_STARTED_WITH = dict(os.environ)  # before torch's import sets variables of its own (TORCHINDUCTOR_CACHE_DIR)


def _hello() -> bytes:
    """The ready message: the environment the server started with, and what its imports set (torch sets
    TORCHINDUCTOR_CACHE_DIR: a requester that imported torch itself has it too, and that is no difference)."""
    imports = {k: v for k, v in os.environ.items() if _STARTED_WITH.get(k) != v}
    return json.dumps({"ready": True, "executable": sys.executable, "env": _STARTED_WITH,
                       "set_by_imports": imports}).encode() + b"\n"


def _serve(sock: socket.socket, listen: socket.socket | None = None) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # the imported objects move to the collector's permanent generation: a child's collections then never
    # write to them, so their pages stay shared with the server instead of being copied into every child
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is diagnose's to forward, not ours
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sock.sendall(_hello())
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, _Client(sock))
    sel.register(wake_r, selectors.EVENT_READ)
    if listen is not None:
        sel.register(listen, selectors.EVENT_READ)
    owners: dict[int, _Client] = {}  # child pid -> the connection that asked for it
    while True:
        for key, _ in sel.select():
            if key.fileobj is wake_r:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            elif key.fileobj is listen:
                conn, _ = listen.accept()
                try:
                    conn.sendall(_hello())
                except OSError:
                    conn.close()
                    continue
                sel.register(conn, selectors.EVENT_READ, _Client(conn))
            else:
                client: _Client = key.data
                try:
                    data, fds, _, _ = socket.recv_fds(client.sock, 65536, STDIO)
                except OSError:
                    data, fds = b"", []
                client.fds += fds
                if not data:  # the requester is gone: nobody will read what its children measure
                    _kill_children_of(None if client.sock is sock else client, owners)
                    if client.sock is sock:
                        return
                    sel.unregister(client.sock)
                    client.sock.close()
                    for fd in client.fds:
                        os.close(fd)
                    continue
                client.buffer += data
                while b"\n" in client.buffer:
                    line, client.buffer = client.buffer.split(b"\n", 1)
                    stdio, client.fds = client.fds[:STDIO], client.fds[STDIO:]
                    keep = [k.fileobj for k in sel.get_map().values()]
                    pid = _fork(json.loads(line), stdio, keep, (wake_r, wake_w))
                    for fd in stdio:
                        os.close(fd)
                    owners[pid] = client
                    client.send({"pid": pid})
        for pid in list(owners):  # reap whatever ended
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                owners.pop(pid).send({"pid": pid, "status": status})


def _kill_children_of(client: _Client | None, owners: dict[int, _Client]) -> None:
    """Kill the process groups (each child's session) of the children `client` asked for that still run (all
    of them for None: the server is ending). diagnose waits for or stops every pass before it closes its
    connection, so these are the passes of a diagnose that was killed, or of one that stopped waiting."""
    for pid, owner in list(owners.items()):
        if client is None or owner is client:
            for kill in (os.killpg, os.kill):  # the child's own: one just forked may not have made its session yet
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _fork(request: dict[str, Any], stdio: list[int], sockets: list, pipe: tuple[int, int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        for s in sockets:  # the server's: connections, the listening socket
            if isinstance(s, socket.socket):
                s.close()
        signal.set_wakeup_fd(-1)
        for fd in pipe:
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(stdio):  # the requester's own streams
            os.dup2(fd, target)
            os.close(fd)
        if request.get("stdin_null"):
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        for key, fds in (("log", (1, 2)), ("stdout", (1,))):
            if request.get(key):
                fd = os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                for target in fds:
                    os.dup2(fd, target)
                os.close(fd)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        _fresh_random_state()
        args = list(request.get("args", []))
        if request.get("module"):
            import runpy

            sys.argv = [request["module"], *args]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        else:
            import importlib

            module, _, function = request["call"].partition(":")
            sys.argv = [module, *args]
            code = getattr(importlib.import_module(module), function or "main")(args)
            code = code if isinstance(code, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _fresh_random_state() -> None:
    """What a new interpreter would have: Python's and numpy's generators seeded from the OS, not the
    server's state shared by every child."""
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(argv[0]))
    listen = None
    if len(argv) > 1:  # shared: runs connect to this path (SHARED_ENV)
        listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listen.bind(argv[1])
        listen.listen(16)
    try:
        _serve(sock, listen)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        if listen is not None:
            listen.close()
            try:
                os.unlink(argv[1])
            except OSError:
                pass
    return 0


# ---------------------------------------------------------------- client side


def _own_environment(set_by_imports: dict[str, str]) -> dict[str, str]:
    """Our environment without what the server's own imports set to the same values (our imports did)."""
    return {k: v for k, v in os.environ.items() if set_by_imports.get(k) != v}


def _stdio() -> tuple[list[int], list[int]]:
    """(our stdin, stdout and stderr to send, the ones opened on /dev/null for a closed stream, to close)."""
    fds, opened = [], []
    for fd in range(STDIO):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            fds.append(null)
            opened.append(null)
    return fds, opened


class ForkedChild:
    """The subset of subprocess.Popen that diagnose/launch.py uses, for a child of the server."""

    def __init__(self, server: "ForkServer", pid: int):
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server._pump(0.0)
            self._settle()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            if not self.server._pump(left if left is not None else 1.0) and self.server.dead:
                self.returncode = self._gone()
            self._settle()
        return self.returncode

    def _settle(self) -> None:
        status = self.server.exits.pop(self.pid, None)
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)

    def _gone(self) -> int:
        """The server died: the child's status is lost; it may still run (killed by its process group)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return -signal.SIGKILL


class ForkServer:
    """Client: starts `python -m diagnose.forkserver` and asks it for children."""

    def __init__(self, proc: subprocess.Popen | None, sock: socket.socket):
        self.proc = proc
        self.sock = sock
        self.buffer = b""
        self.exits: dict[int, int] = {}
        self.dead = False

    @classmethod
    def start(cls, while_waiting=None, listen: str | None = None) -> ForkServer | None:
        """A server with torch imported, or None when it cannot start (callers then spawn passes): the shared
        one at SHARED_ENV's path when it has this interpreter and environment, else one of our own.

        `while_waiting()`, if given, runs while our own server imports torch (seconds on one CPU): nothing is
        measured then, so the caller can do its own slow imports for free. `listen`: a path where the new
        server also takes other runs' connections (a shared server: set SHARED_ENV to it first)."""
        shared = os.environ.get(SHARED_ENV)
        if shared and listen is None:
            server = cls._connect(shared)
            if server is not None:
                return server
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "diagnose.forkserver", str(theirs.fileno()),
                                     *([listen] if listen else [])],
                                    pass_fds=(theirs.fileno(),), stdin=None, stdout=None, stderr=None)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        server = cls(proc, ours)
        if while_waiting is not None:
            while_waiting()
        try:
            message = server._next(READY_TIMEOUT_S)
        except (OSError, ValueError, KeyboardInterrupt):
            message = None
        if not message or not message.get("ready"):
            server.close()
            return None
        return server

    @classmethod
    def _connect(cls, path: str) -> ForkServer | None:
        """The shared server at `path`, or None: not there, or another interpreter or environment."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(path)
        except OSError:
            sock.close()
            return None
        server = cls(None, sock)
        try:
            message = server._next(5.0)
        except (OSError, ValueError):
            message = None
        if not message or not message.get("ready") or message.get("executable") != sys.executable \
                or message.get("env") != _own_environment(message.get("set_by_imports") or {}):
            server.close()
            return None
        return server

    def spawn(self, call: str | None, args: list[str], *, log: str | None, stdin_null: bool,
              cwd: str | None = None, module: str | None = None, stdout: str | None = None) -> ForkedChild:
        """A child running `call` ("module:function") with args, or `python -m module` args, with our
        standard streams (unless `log`, `stdout` or `stdin_null` replace them) and working directory."""
        request = {"call": call, "module": module, "args": args, "log": log, "stdout": stdout,
                   "stdin_null": stdin_null, "cwd": cwd or os.getcwd()}
        data = json.dumps(request).encode() + b"\n"
        stdio, opened = _stdio()
        try:
            sent = socket.send_fds(self.sock, [data], stdio)
            self.sock.sendall(data[sent:])
        finally:
            for fd in opened:
                os.close(fd)
        while True:
            message = self._next(30.0)
            if message is None:
                raise OSError("the fork server did not answer")
            if "status" in message:
                self.exits[message["pid"]] = message["status"]
            elif "pid" in message:
                return ForkedChild(self, message["pid"])

    def _next(self, timeout: float | None) -> dict[str, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                return None
            if not data:
                self.dead = True
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _pump(self, timeout: float) -> bool:
        """Read what the server said within `timeout` s; False when nothing came."""
        if self.dead:
            return False
        message = self._next(timeout)
        if message is None:
            return False
        if "status" in message:
            self.exits[message["pid"]] = message["status"]
        return True

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.proc is not None:  # not the shared server: that one goes on serving others
                self._stop()

    def _stop(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
