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

Protocol, one JSON object per line over a socketpair: the server says
{"ready": true} once imported; a request {"call": "module:function" (called
with the args) or "module": NAME (run as `python -m NAME`), "args": [...],
"cwd": DIR, "log": FILE or null (stdout and stderr; null: the server's own),
"stdout": FILE or null (stdout apart), "stdin_null": bool} is answered
{"pid": PID}, and {"pid": PID, "status": WAITSTATUS} follows when that child
ends. The server exits when its socket closes.

    python -m diagnose.forkserver FD
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


# ---------------------------------------------------------------- server side


def _serve(sock: socket.socket) -> None:
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
    sock.sendall(b'{"ready": true}\n')
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffer = b""
    children: set[int] = set()
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    pid = _fork(json.loads(line), sock, (wake_r, wake_w))
                    children.add(pid)
                    sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            else:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
        for pid in list(children):  # reap whatever ended
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                children.discard(pid)
                sock.sendall(json.dumps({"pid": pid, "status": status}).encode() + b"\n")


def _fork(request: dict[str, Any], sock: socket.socket, pipe: tuple[int, int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        sock.close()
        signal.set_wakeup_fd(-1)
        for fd in pipe:
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
    try:
        _serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return 0


# ---------------------------------------------------------------- client side


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

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self.proc = proc
        self.sock = sock
        self.buffer = b""
        self.exits: dict[int, int] = {}
        self.dead = False

    @classmethod
    def start(cls, while_waiting=None) -> "ForkServer | None":
        """A server with torch imported, or None when it cannot start (callers then spawn passes).

        `while_waiting()`, if given, runs while the server imports torch (seconds on one CPU): nothing is
        measured then, so the caller can do its own slow imports for free."""
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "diagnose.forkserver", str(theirs.fileno())],
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

    def spawn(self, call: str | None, args: list[str], *, log: str | None, stdin_null: bool,
              cwd: str | None = None, module: str | None = None, stdout: str | None = None) -> ForkedChild:
        """A child running `call` ("module:function") with args, or `python -m module` args."""
        request = {"call": call, "module": module, "args": args, "log": log, "stdout": stdout,
                   "stdin_null": stdin_null, "cwd": cwd or os.getcwd()}
        self.sock.sendall(json.dumps(request).encode() + b"\n")
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
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
