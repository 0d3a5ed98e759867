"""The fault table of issue 33: targets that start processes or threads, one row per case.

tests/e2e/test_processes.py runs each case once (`--layers operators`); benchmarks/process_faults.py runs each
five times under the default layers. `output` is the first line the plain run prints; `roles` the process roles
whose operators the operator table must show (ProcessShare.role), `not_recorded` the ways of starting a Python
process the operator pass must name as not recorded (StartedProcess.how).
"""

from __future__ import annotations

from dataclasses import dataclass

HERE = "tests/data/processes"


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]  # the script (under tests/data/processes/) and its arguments
    output: str  # the first line the plain run prints
    roles: tuple[str, ...] = ()  # process roles that must run operators in the table
    not_recorded: tuple[str, ...] = ()  # how the Python processes the pass cannot record were started
    threads: bool = False  # the operators must name the worker threads they ran in

    @property
    def command(self) -> list[str]:
        return [f"{HERE}/{self.argv[0]}", *self.argv[1:]]


CASES = [
    Case("Pool fork, with", ("fork_pool.py", "fork", "with"), "sum 496", roles=("pool worker",)),
    Case("Pool fork, close/join", ("fork_pool.py", "fork", "close"), "sum 496", roles=("pool worker",)),
    Case("Pool spawn, with", ("fork_pool.py", "spawn", "with", "2"), "sum 496", not_recorded=("spawn",)),
    Case("Pool spawn, close/join", ("fork_pool.py", "spawn", "close", "2"), "sum 496", not_recorded=("spawn",)),
    Case("Pool forkserver, with", ("fork_pool.py", "forkserver", "with", "2"), "sum 496",
         not_recorded=("forkserver",)),
    Case("Pool forkserver, close/join", ("fork_pool.py", "forkserver", "close", "2"), "sum 496",
         not_recorded=("forkserver",)),
    Case("ProcessPoolExecutor", ("process_pool_executor.py",), "sum 120", roles=("pool worker",)),
    Case("DataLoader num_workers=2", ("dataloader_workers.py",), "done", roles=("main", "DataLoader worker")),
    Case("DataLoader num_workers=2, persistent", ("dataloader_workers.py", "persistent"), "done",
         roles=("main", "DataLoader worker")),
    Case("subprocess.run(python -c torch work)", ("python_subprocess.py",), "done", roles=("main",),
         not_recorded=("subprocess",)),
    Case("os.fork() + waitpid", ("os_fork.py",), "child exit 0", roles=("forked child",)),
    Case("torch.multiprocessing.spawn", ("mp_spawn.py",), "done", not_recorded=("spawn",)),
    Case("ThreadPoolExecutor(4) serving a model", ("thread_pool.py",), "done", roles=("main",), threads=True),
]


@dataclass
class Verdict:
    """One run of a case under diagnose, against the issue's five questions."""

    no_traceback: bool  # neither diagnose nor the target's children printed one
    exit_0: bool
    valid_report: bool  # report.json was written (its schema is checked by the caller)
    children_seen: bool  # the roles' operators are in the table, and what could not be recorded is named
    output_unchanged: bool  # the target printed what its plain run prints, and nothing more
    why: list[str]

    @property
    def ok(self) -> bool:
        return self.no_traceback and self.exit_0 and self.valid_report and self.children_seen and self.output_unchanged


def judge(case: Case, code: int, stdout: str, stderr: str, report: dict | None,
          plain: tuple[str, str] | None = None) -> Verdict:
    """The verdict on one run: `stdout`/`stderr` of `diagnose -q ...`, its report.json, and (when known) what the
    plain run printed (its stdout and stderr); without it, the case's first line stands for the plain output."""
    why = []
    text = stdout + stderr
    no_traceback = "Traceback" not in text and "KeyboardInterrupt" not in text
    if not no_traceback:
        why.append("a traceback was printed")
    if plain is None:
        output_unchanged = stdout.startswith(case.output + "\n")
    else:
        extra = set(stderr.splitlines()) - set(plain[1].splitlines())
        output_unchanged = stdout.startswith(plain[0]) and not extra
        if extra:
            why.append(f"printed on stderr, not by the plain run: {sorted(extra)[:3]}")
    if not stdout.startswith(plain[0] if plain else case.output + "\n"):
        why.append(f"the target's output differs: {stdout[:200]!r}")
    if code:
        why.append(f"exit code {code}")
    children_seen = report is not None
    if report is not None:
        rows = report.get("operators") or []
        roles = {share["role"] for row in rows for share in row.get("processes") or []}
        missing = set(case.roles) - roles
        if missing:
            why.append(f"no operators of {sorted(missing)} (roles seen: {sorted(roles)})")
        named = {p["how"] for p in (report.get("operator_summary") or {}).get("not_recorded") or []}
        unnamed = set(case.not_recorded) - named
        if unnamed:
            why.append(f"not named as not recorded: {sorted(unnamed)}")
        threads = {share["thread"] for row in rows for share in row.get("processes") or []}
        unthreaded = case.threads and not any(t and t.startswith("ThreadPoolExecutor") for t in threads)
        if unthreaded:
            why.append(f"no operators named after the worker threads (threads: {sorted(map(str, threads))})")
        layer = (report.get("layers") or {}).get("operators") or {}
        if "no torch operators" in (layer.get("reason") or "") and case.roles:
            why.append(f"the operator layer says: {layer.get('reason')}")
        children_seen = not missing and not unnamed and not unthreaded and not (
            "no torch operators" in (layer.get("reason") or "") and case.roles)
    else:
        why.append("no report")
    return Verdict(no_traceback, code == 0, report is not None, children_seen, output_unchanged, why)
