"""Command line: options -> Target + Config -> api.diagnose; argv split between diagnose and the script (_split).

    diagnose [OPTIONS] model.py [SCRIPT_ARGS...] [-- MORE_SCRIPT_ARGS...]
    diagnose [OPTIONS] model.py:step --warmup 3 --iters 20
    diagnose --load report.json [--format terminal|md|json]
    diagnose callgraph [OPTIONS] model.py [ARGS...]   (only the call-graph pass, quick)
    diagnose threads [--sweep] model.py [ARGS...]      (only the uninstrumented pass and the thread sampler)
    diagnose probe [--refresh]                          (this machine's GEMM and memory peaks, cached)
    diagnose --nproc-per-node 2 train.py [ARGS...]      (every rank of a torchrun job, one report)
    diagnose merge NODE0/report.json NODE1/report.json -o DIR   (per-node reports of one job -> one)
    diagnose attach PID [--duration S] [--rate HZ]     (a running process, sampled from outside: diagnose/attach/)

Exit codes: 0 ok; 1 a bug in diagnose; 2 bad usage or target (nothing run);
3 the target failed, exited non-zero or timed out (report written);
4 a CI gate tripped: --fail-on found findings at that severity (report written),
  or `diagnose compare --fail-on-regression PCT` saw the wall time grow by more than PCT outside the noise;
130 interrupted (partial report written); 143 SIGTERM, handled the same way.
diagnose attach PID also: 3 the process exited while sampled (partial report written); 5 ptrace not permitted
on it; 6 another user's process; 7 not a Python process.

    diagnose compare BEFORE.json AFTER.json [--format terminal|md|json] [--fail-on-regression PCT] [--repeat N]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys

from diagnose import __version__, api, budget, compare, findings, output
from diagnose.attach import run as attach_run
from diagnose.config import ATTACH_DURATION_S, ATTACH_RATE_HZ, AttachConfig, Config
from diagnose.distributed import launcher
from diagnose.errors import DiagnoseError, ExitCode, UsageError
from diagnose.layers.efficiency import probe
from diagnose.render import PRINTABLE, RENDERERS, terminal
from diagnose.render import compare as compare_render
from diagnose.render.fmt import duration
from diagnose.render.progress import TerminalProgress
from diagnose.report import combine, comparison
from diagnose.report import io as report_io
from diagnose.target import Target, parse_target_spec
from diagnose.whatif.variants import ORDER

EPILOG = """\
examples:
  diagnose train.py                       run train.py as python would, write reports/train-<time>/
  diagnose train.py --epochs 1            arguments after the script go to the script...
  diagnose -o out train.py -- -o x        ...and everything after -- too, even options diagnose knows
  diagnose model.py:step --iters 50       import model.py, call step() 3 warm-up + 50 measured times
  diagnose --load out/report.json         re-render a report without running anything
  diagnose callgraph train.py             only the cProfile pass: callgraph.png and Python hotspots
  diagnose threads --sweep train.py       thread sampling, then re-runs at 1, 2, ... threads: what to set
  diagnose probe                          this machine's GEMM and memory-bandwidth peaks (the roofline's roofs)
  diagnose --nproc-per-node 2 train.py    run train.py under torchrun with 2 ranks (gloo on CPU): per-rank tables
  diagnose merge a/report.json b/report.json -o all   combine the per-node reports of one torchrun job
  diagnose attach 12345 --duration 30     a job already running: stacks, threads and memory sampled from outside
  diagnose --fail-on high train.py        CI: exit 4 when a high finding exists (the report is still written)
  diagnose compare before/report.json after/report.json --fail-on-regression 10
                                          what changed, with each side's noise; exit 4 if > 10% slower

exit codes: 0 ok, 2 bad usage or target, 3 the target failed or timed out
(report still written), 4 a --fail-on / --fail-on-regression gate tripped,
130 interrupted / 143 SIGTERM (partial report written), 1 a bug in diagnose;
diagnose attach: 3 the process exited while sampled (partial report), 5 ptrace not permitted,
6 another user's process, 7 not a Python process.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other usage error
        if message.startswith("unrecognized arguments"):
            message += ("; options meant for the script go after it (diagnose train.py --lr 0.1), or after -- "
                        "when diagnose has an option of that name")
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser(prog: str = "diagnose") -> argparse.ArgumentParser:
    d = Config()  # every default below is the Config's

    p = _Parser(
        prog=prog,
        description="CPU performance diagnosis for PyTorch: which operators at which shapes take the time, "
                    "which line of your code calls them, and what to try.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", nargs="?", help="script.py, or script.py:function to call in a loop")
    p.add_argument("script_args", nargs="*", metavar="ARGS",
                   help="the script's arguments, as python script.py ARGS would get them; diagnose's own options "
                        "may stand among them (-o, --iters, ...): give those to the script after --")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write the report (default: reports/<script>-<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--force", action="store_true",
                   help="replace report files an earlier run left in DIR (other files are never touched)")
    p.add_argument("--skip-steps", "--warmup", dest="skip_steps", type=int, default=d.skip_steps, metavar="K",
                   help=f"steps to run before the measured window: the script's steps (found by themselves: "
                        f"optimizer.step(), the outermost module's forward, or diagnose.mark_step()), or calls "
                        f"of script.py:function ({d.skip_steps})")
    p.add_argument("--steps", "--iters", dest="steps", type=int, default=d.steps, metavar="N",
                   help=f"steps every pass measures after them; in script mode the script is then ended, like a "
                        f"normal exit ({d.steps})")
    p.add_argument("--full-run", action="store_true",
                   help="script mode: run and record the whole script in every pass (steps are still counted)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop a pass after this long; what it measured so far is kept")
    p.add_argument("--stall-after", type=float, default=d.stall_after_s, metavar="SECONDS",
                   help=f"a pass whose processes used no CPU (under 2%% of one) this long is hung: dump its "
                        f"threads' stacks, stop it keeping what it measured, go on ({d.stall_after_s:g}; 0: never, "
                        f"for targets that wait on input)")
    p.add_argument("--layers", metavar="NAMES", default=",".join(d.layers),
                   help=f"comma-separated layers to run (default and choices: {','.join(d.layers)})")
    p.add_argument("--vtune", nargs="?", const="hotspots", default=None,
                   choices=("hotspots", "threading", "uarch-exploration"),
                   help="add a pass under Intel VTune (vtune on PATH) with ITT labels per aten op; "
                        "its CPI, spin and overhead time go into counters (default analysis: hotspots)")
    p.add_argument("--sweep", action="store_true",
                   help="re-run the workload at several intra-op thread counts (and DataLoader worker counts "
                        "when it has workers) and recommend a setting")
    p.add_argument("--doctor", action="store_true",
                   help="environment doctor: run every trial this machine can (allocators, flush_denormal, thread "
                        "binding) on your steps, not only those answering a check that warned")
    p.add_argument("--what-if", metavar="LIST",
                   help="measure code changes on your steps, applied from outside to your outermost nn.Module: "
                        "auto (those that apply) or a comma list of inference_mode, channels_last, bf16, float32, "
                        "compile, flush_denormal, threads (= --sweep); each in interleaved rounds against the "
                        "unchanged run, with a 95%% interval and an output check")
    p.add_argument("--sweep-threads", metavar="N,N,...",
                   help="thread counts to sweep (default: 1, 2, 4, ... up to the usable CPUs, and the target's own)")
    p.add_argument("--sample", action="store_true",
                   help="also sample the uninstrumented pass with py-spy (pip install py-spy): each operator's share "
                        "by sampling beside the operator pass's, flagged where instrumentation distorts it by more "
                        "than 10 points")
    _layer_options(p)
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="run the target under torchrun (python -m torch.distributed.run) with N ranks on this node, "
                        "every pass, every rank measured; one report for the job")
    p.add_argument("--torchrun-args", metavar='"ARGS"',
                   help='with --nproc-per-node: torchrun\'s own rendezvous options for several nodes, e.g. '
                        '"--nnodes 2 --node-rank 0 --master-addr host0 --master-port 29500" '
                        '(default: --standalone --nnodes 1)')
    p.add_argument("--load", metavar="REPORT_JSON", help="re-render an existing report.json; runs nothing")
    p.add_argument("--format", choices=PRINTABLE, default="terminal", help="with --load: what to print (terminal)")
    p.add_argument("--fail-on", choices=("high", "medium"),
                   help="CI gate: exit 4 when a finding of this severity or higher exists (medium: medium or "
                        "high); the report is written either way; works with --load too")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--version", action="version", version=f"diagnose {__version__}")
    return p


def _option_groups() -> list[tuple[str, type]]:
    """(Config field, options type) of every registered layer that has options (layers/base.Layer.options)."""
    from diagnose.layers import LAYERS, OPT_IN  # the registry: its layers' option groups become flags

    return [layer.options for layer in (*LAYERS.values(), *OPT_IN.values()) if layer.options]


def _layer_options(p: argparse.ArgumentParser) -> None:
    """A flag for every layer option declared with config.option(...), its default and help from there."""
    for group, options in _option_groups():
        for f in dataclasses.fields(options):
            meta = f.metadata
            if "flag" not in meta:
                continue
            p.add_argument(meta["flag"], dest=f"{group}.{f.name}", type=type(f.default), default=f.default,
                           metavar=meta["metavar"], choices=meta["choices"], help=meta["help"].format(default=f.default))


def _layer_option_values(args) -> dict[str, object]:
    """Each layer's options group from the parsed flags; a value under its minimum is a UsageError."""
    groups = {}
    for group, options in _option_groups():
        values = {}
        for f in dataclasses.fields(options):
            meta = f.metadata
            if "flag" not in meta:
                continue
            value = getattr(args, f"{group}.{f.name}")
            if meta["minimum"] is not None and value < meta["minimum"]:
                raise UsageError(f"{meta['flag']} wants {meta['what']} >= {meta['minimum']:g}, not {value:g}")
            values[f.name] = value
        groups[group] = options(**values)
    return groups


def _split(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """(diagnose's tokens, the script's arguments), like `python script.py ARGS`.

    Everything after `--` is the script's. Before it, diagnose's own options are diagnose's wherever they
    stand (`diagnose model.py:step --iters 50`); after the script, every other token (positionals and
    options diagnose does not know, with their values, in order) is the script's. Before the script an
    unknown option stays diagnose's, for argparse to reject in one line.
    """
    script: list[str] = []
    tail: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1:]
    own: list[str] = []
    seen_target = False
    options = parser._option_string_actions  # noqa: SLF001 - argparse's own table of option strings
    i = 0
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        action = options.get(name) if token.startswith("-") and token != "-" else None
        if action is None and token.startswith("-") and len(token) > 2 and token[1] != "-":
            action = options.get(token[:2])  # -oDIR
            name = token[:2] if action else name
        if action is not None:
            own.append(token)
            attached = "=" in token or (name != token and not token.startswith("--"))
            if not attached and i + 1 < len(argv):
                if action.nargs is None:
                    own.append(argv[i + 1])
                    i += 1
                elif action.nargs == "?" and action.choices and argv[i + 1] in action.choices:
                    own.append(argv[i + 1])
                    i += 1
        elif token.startswith("-") and token != "-":
            (script if seen_target else own).append(token)
        elif not seen_target:
            own.append(token)
            seen_target = True
        else:
            script.append(token)
        i += 1
    return own, script + tail


def _shadowed_options(own: list[str], target: str | None, script: str) -> list[str]:
    """diagnose's options given after the script that the script also defines (`--steps` in both)."""
    if not target or target not in own:
        return []
    names = [t.split("=", 1)[0] for t in own[own.index(target) + 1:] if t.startswith("--")]
    try:
        with open(script, encoding="utf-8", errors="replace") as fh:
            source = fh.read()
    except OSError:
        return []
    return [n for n in dict.fromkeys(names) if f'"{n}"' in source or f"'{n}'" in source]


def _load(args) -> int:
    report = report_io.load(args.load)
    sys.stdout.write(RENDERERS[args.format].render(report, None).text())
    return _gate(report, args.fail_on, ExitCode.OK)


def _gate(report, fail_on: str | None, code: int) -> int:
    """--fail-on: exit GATE when findings at or above that severity exist and the run itself went fine."""
    if not fail_on or code != ExitCode.OK:
        return code
    levels = ("high",) if fail_on == "high" else ("high", "medium")
    hits = [f for f in report.findings if f.severity in levels]
    if not hits:
        return code
    where = "; ".join(f"{f.severity} {f.kind}" + (f" at {f.location}" if f.location else "") for f in hits[:3])
    print(f"diagnose: --fail-on {fail_on}: {len(hits)} finding(s) at or above {fail_on} ({where}); "
          f"exit {int(ExitCode.GATE)}", file=sys.stderr)
    return ExitCode.GATE


def _compare(argv: list[str]) -> int:
    p = _Parser(prog="diagnose compare",
                description="What changed between two runs: wall time with each side's noise, findings gone "
                            "or new, operator times per shape. Runs nothing, unless --repeat asks it to run both "
                            "targets again, interleaved.")
    p.add_argument("before", metavar="BEFORE.json", help="report.json of the run before the change")
    p.add_argument("after", metavar="AFTER.json", help="report.json of the run after the change")
    p.add_argument("--format", choices=("terminal", "md", "json"), default="terminal", help="what to print (terminal)")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="exit 4 when the wall time grew by more than PCT%% outside the noise")
    p.add_argument("--noise-floor", type=float, default=compare.MIN_FLOOR_PCT, metavar="PCT",
                   help=f"smallest change called real, in %% ({compare.MIN_FLOOR_PCT:g}; all single runs get)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="run both targets again, a warm-up run each, then N rounds of BEFORE, AFTER, AFTER, "
                        "BEFORE (4N runs of the measured window), and call the wall time's change on those: a "
                        f"verdict that holds on a shared machine (N >= {compare.MIN_ROUNDS}; "
                        f"{compare.ROUNDS_ADVISED} advised)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (--repeat)")
    args = p.parse_args(argv)
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise UsageError("--fail-on-regression wants a percentage >= 0")
    if args.noise_floor < 0:
        raise UsageError("--noise-floor wants a percentage >= 0")
    if args.repeat is not None and args.repeat < compare.MIN_ROUNDS:
        raise UsageError(f"--repeat wants a number of rounds >= {compare.MIN_ROUNDS} (fewer cannot bound the "
                         "median round at 95%)")
    before, after = report_io.load(args.before), report_io.load(args.after)
    rerun = None
    if args.repeat:
        from diagnose import interleave  # runs the targets: imports the session and every layer, only then

        rerun = interleave.run(before, after, args.repeat, None if args.quiet else _round_progress(args.repeat))
    result = compare.compare(before, after, args.noise_floor, rerun)
    if args.format == "json":
        sys.stdout.write(comparison.dumps(result) + "\n")
    elif args.format == "md":
        sys.stdout.write(compare_render.markdown(result))
    else:
        sys.stdout.write(compare_render.terminal(result))
    limit = args.fail_on_regression
    if limit is not None and result.regression_pct > limit:
        print(f"diagnose: compare: wall time {result.regression_pct:+.1f}% (outside the noise) is above "
              f"--fail-on-regression {limit:g}; exit {int(ExitCode.GATE)}", file=sys.stderr)
        return ExitCode.GATE
    return ExitCode.OK


def _round_progress(rounds: int):
    """compare --repeat's progress: one line a round on stderr."""
    seen: list[str] = []

    def on_run(r: int, side: str, seconds: float | None, waited: float | None) -> None:
        contended = f" (waited {100 * waited:.0f}% for CPUs others held)" if waited is not None else ""
        seen.append(f"{side} {duration(seconds) if seconds else 'failed'}{contended}")
        if len(seen) == (2 if r == 0 else 4):  # the warm-up runs, or a round's (interleave.ORDER)
            what = "warm-up (not counted)" if r == 0 else f"round {r}/{rounds}"
            print(f"diagnose compare: {what}: {', '.join(seen)}", file=sys.stderr, flush=True)
            seen.clear()
    return on_run


def _run(args, extra: list[str], subcommand: str | None = None) -> int:
    if not args.target:
        raise UsageError("give a script to diagnose, e.g. diagnose train.py (see diagnose --help)")
    script, function = parse_target_spec(args.target)
    config = _config(args, subcommand, function)
    target = Target(script=script, argv=extra, function=function)
    progress = api.NullProgress() if args.quiet else TerminalProgress()
    result = api.diagnose(target, config, progress)
    sys.stdout.write("\n" + terminal.render(result.report, result.output_dir))
    return _gate(result.report, args.fail_on, result.exit_code)


def _config(args, subcommand: str | None, function: str | None):
    """The parsed options as a Config; a value no run can use is a UsageError, checked in the order the
    options are listed."""
    from diagnose.layers import LAYERS  # imports every layer: only once a run is certain

    layers = tuple(name.strip() for name in args.layers.split(",") if name.strip())
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        raise UsageError(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(LAYERS)}")
    if args.steps < 1 or args.skip_steps < 0:
        raise UsageError(f"--steps wants a number of steps >= 1 and --skip-steps one >= 0, not {args.steps} and "
                         f"{args.skip_steps}")
    if args.full_run and function:
        raise UsageError("--full-run is for script mode; script.py:function measures --steps calls")
    if args.stall_after < 0:
        raise UsageError("--stall-after wants seconds >= 0 (0 turns stall detection off)")
    groups = _layer_option_values(args)
    what_if = _what_if(args.what_if)
    sweep_threads = _sweep_threads(args.sweep_threads)
    torchrun_args: list[str] = []
    if args.nproc_per_node is not None or args.torchrun_args:
        if args.nproc_per_node is None:
            raise UsageError("--torchrun-args goes with --nproc-per-node N (the ranks on this node)")
        if args.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node wants a number of ranks >= 1, not {args.nproc_per_node}")
        torchrun_args = launcher.parse_torchrun_args(args.torchrun_args)
    groups["sweep"] = dataclasses.replace(groups["sweep"], threads=sweep_threads,
                                          enabled=args.sweep or sweep_threads is not None or "threads" in (what_if or ()))
    if subcommand == "callgraph":  # only the cProfile pass
        layers = ("python",)
    elif subcommand == "threads":
        layers = ("threads",)
    return Config(
        output_dir=args.output, force=args.force, timeout_s=args.timeout, stall_after_s=args.stall_after,
        layers=layers, baseline=subcommand != "callgraph",
        skip_steps=args.skip_steps, steps=args.steps, full_run=args.full_run,
        **groups,
        doctor=args.doctor, what_if=tuple(n for n in what_if or () if n != "threads"), vtune=args.vtune,
        nproc_per_node=args.nproc_per_node, torchrun_args=tuple(torchrun_args), sample=args.sample,
    )


def _what_if(text: str | None) -> tuple[str, ...] | None:
    """--what-if LIST: its names (threads among them meaning --sweep), or None when not given."""
    if text is None:
        return None

    names = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [n for n in names if n not in (*ORDER, "auto", "threads")]
    if not names or unknown:
        raise UsageError(f"--what-if wants auto or a comma list of {', '.join(ORDER)}, threads; "
                         f"not {', '.join(unknown) or repr(text)}")
    return names


def _sweep_threads(text: str | None) -> tuple[int, ...] | None:
    """--sweep-threads N,N,...: the thread counts, sorted, or None when not given."""
    if not text:
        return None
    try:
        threads = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise UsageError(f"--sweep-threads wants numbers like 1,2,4, not {text!r}") from None
    if not threads or min(threads) < 1:
        raise UsageError("--sweep-threads wants thread counts of at least 1")
    return threads


def _merge(argv: list[str]) -> int:
    """`diagnose merge REPORT.json... [-o DIR]`: the per-node reports of one torchrun job as one report
    (diagnose/report/combine.py), its findings derived again, written like a run's."""
    p = _Parser(prog="diagnose merge",
                description="Combine the per-node reports of one torchrun job (diagnose --nproc-per-node N "
                            "--torchrun-args ... on each node) into one report.")
    p.add_argument("reports", nargs="+", metavar="REPORT_JSON", help="each node's report.json")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write the merged report (default: reports/<script>-merged-<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--force", action="store_true", help="replace report files an earlier run left in DIR")
    p.add_argument("-q", "--quiet", action="store_true", help="print only where the report went")
    args = p.parse_args(argv)
    merged = combine.combine([(path, report_io.load(path)) for path in args.reports])
    merged.step_budget = budget.of(merged)
    findings.judge(merged)
    stem = os.path.splitext(os.path.basename(merged.target.script))[0]
    out = args.output or output.default_output_dir(f"{stem}-merged", Config().reports_root)
    output.prepare_output_dir(out, args.force)
    output.write_report(merged, out)
    if args.quiet:
        sys.stdout.write(os.path.join(out, "report.json") + "\n")
    else:
        sys.stdout.write(terminal.render(merged, out))
    return ExitCode.OK


def _attach(argv: list[str]) -> int:
    """`diagnose attach PID`: a running process sampled from outside (diagnose/attach/)."""
    p = _Parser(prog="diagnose attach",
                description="Diagnose a process that is already running, without restarting or stopping it: "
                            "py-spy samples its Python and native stacks (operators, Python lines, libraries, "
                            "steps), /proc its threads and memory. Needs py-spy (pip install py-spy) and "
                            "permission to ptrace the process.")
    p.add_argument("pid", metavar="PID", help="the process to attach to: the python running your script, or a "
                                              "torchrun launcher (every rank below it is sampled)")
    p.add_argument("--duration", type=float, default=ATTACH_DURATION_S, metavar="SECONDS",
                   help=f"how long to sample ({ATTACH_DURATION_S:g})")
    p.add_argument("--rate", type=float, default=ATTACH_RATE_HZ, metavar="HZ",
                   help=f"stack samples a second per thread ({ATTACH_RATE_HZ:g}; each pauses the thread while its "
                        "native stack is read)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write the report (default: reports/<script>-attach-<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--force", action="store_true", help="replace report files an earlier run left in DIR")
    p.add_argument("--fail-on", choices=("high", "medium"),
                   help="CI gate: exit 4 when a finding of this severity or higher exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    if not args.pid.isdigit():
        raise UsageError(f"attach wants a process id (a number), not {args.pid!r}")
    config = AttachConfig(pid=int(args.pid), duration_s=args.duration, rate_hz=args.rate, output_dir=args.output,
                          force=args.force)

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr)

    def on_sigterm(signum, frame) -> None:  # a CI job's timeout, kill: stop sampling, write what was sampled
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        result = attach_run.attach(config, say)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if result.report.run.error:
        print(f"diagnose: {result.report.run.error}", file=sys.stderr)
    sys.stdout.write("\n" + terminal.render(result.report, result.output_dir))
    return _gate(result.report, args.fail_on, result.exit_code)


SUBCOMMANDS = ("callgraph", "threads")
ALL_SUBCOMMANDS = ("attach", "compare", "merge", "probe", *SUBCOMMANDS)


def _run_handling_sigterm(args, extra: list[str], subcommand: str | None) -> int:
    """SIGTERM (a CI job's timeout, kill) is raised as Ctrl-C would be: the passes' children are stopped and
    the report written; the exit code then says SIGTERM."""
    import signal

    received: list[int] = []

    def on_sigterm(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up must not be cut short by a second one
        received.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = _run(args, extra, subcommand)
    except KeyboardInterrupt:
        if not received:
            raise
        code = ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received and code == ExitCode.INTERRUPTED:
        print("diagnose: terminated (SIGTERM); the report holds what was measured", file=sys.stderr)
        return ExitCode.TERMINATED
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # commands that run no script: on report.json files (what changed between two runs; per-node reports of one
    # job -> one), and a running process sampled from outside
    own_commands = {"compare": _compare, "merge": _merge, "attach": _attach}
    if argv and argv[0] in own_commands:
        try:
            return own_commands[argv[0]](argv[1:])
        except DiagnoseError as exc:
            print(f"diagnose: error: {exc.message}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print("diagnose: interrupted", file=sys.stderr)
            return ExitCode.INTERRUPTED
    if argv and argv[0] == "probe":  # machine peaks only: runs no target

        return probe.main(argv[1:])
    subcommand = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    try:
        parser = build_parser("diagnose " + subcommand if subcommand else "diagnose")
        own, extra = _split(parser, argv[1:] if subcommand else argv)
        args = parser.parse_args(own)
        sub = args.target
        if not subcommand and sub in ALL_SUBCOMMANDS and not os.path.exists(sub):  # `diagnose -q threads x.py`
            raise UsageError(f"the subcommand goes first: diagnose {sub} [OPTIONS] ..., not after options "
                             f"({' '.join(own[:own.index(sub) + 1])})")
        if args.load:
            return _load(args)

        for name in _shadowed_options(own, args.target, parse_target_spec(args.target)[0] if args.target else ""):
            print(f"diagnose: note: {name} after the script is diagnose's own option; your script defines "
                  f"{name} too: to give it to the script, put it after -- (diagnose {args.target} -- {name} ...)",
                  file=sys.stderr)
        return _run_handling_sigterm(args, extra, subcommand)
    except DiagnoseError as exc:
        print(f"diagnose: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("diagnose: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
