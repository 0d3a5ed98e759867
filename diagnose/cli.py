"""Command line: options -> Target + Config -> api.diagnose. No logic lives here.

    diagnose [OPTIONS] model.py [SCRIPT_ARGS...] [-- MORE_SCRIPT_ARGS...]
    diagnose [OPTIONS] model.py:step --warmup 3 --iters 20
    diagnose --load report.json [--format terminal|md|json]
    diagnose callgraph [OPTIONS] model.py [ARGS...]   (only the call-graph pass, quick)
    diagnose threads [--sweep] model.py [ARGS...]      (only the uninstrumented pass and the thread sampler)
    diagnose probe [--refresh]                          (this machine's GEMM and memory peaks, cached)

Exit codes: 0 ok; 1 a bug in diagnose; 2 bad usage or target (nothing run);
3 the target failed, exited non-zero or timed out (report written);
130 interrupted (partial report written).
"""

from __future__ import annotations

import argparse
import sys

from diagnose import __version__
from diagnose.errors import DiagnoseError, ExitCode, UsageError

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

exit codes: 0 ok, 2 bad usage or target, 3 the target failed or timed out
(report still written), 130 interrupted (partial report written), 1 a bug in diagnose.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other usage error
        if message.startswith("unrecognized arguments"):
            message += "; options meant for the script go after --, e.g. diagnose train.py -- --lr 0.1"
        raise UsageError(f"{message} (see diagnose --help)")


def build_parser(prog: str = "diagnose") -> argparse.ArgumentParser:
    from diagnose.layers import LAYERS
    from diagnose.tools import callgraph

    p = _Parser(
        prog=prog,
        description="CPU performance diagnosis for PyTorch: which operators at which shapes take the time, "
                    "which line of your code calls them, and what to try.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", nargs="?", help="script.py, or script.py:function to call in a loop")
    p.add_argument("script_args", nargs="*", help="arguments for the script (also everything after --)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write the report (default: reports/<script>-<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--force", action="store_true",
                   help="replace report files an earlier run left in DIR (other files are never touched)")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="function mode: unmeasured calls first (3)")
    p.add_argument("--iters", type=int, default=20, metavar="N", help="function mode: measured calls (20)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop a pass after this long; what it measured so far is kept")
    p.add_argument("--layers", metavar="NAMES", default=",".join(LAYERS),
                   help=f"comma-separated layers to run (default and choices: {','.join(LAYERS)})")
    p.add_argument("--profile-iters", type=int, default=20, metavar="N",
                   help="function mode: record at most the last N iterations in the operator pass (20)")
    p.add_argument("--trace-max-events", type=int, default=100_000, metavar="N",
                   help="cap on events written to trace.json (100000)")
    p.add_argument("--callgraph-nodes", type=float, default=callgraph.NODE_THRES_PCT, metavar="PCT",
                   help=f"call graph: hide functions under PCT%% of the time ({callgraph.NODE_THRES_PCT:g})")
    p.add_argument("--callgraph-edges", type=float, default=callgraph.EDGE_THRES_PCT, metavar="PCT",
                   help=f"call graph: hide calls under PCT%% of the time ({callgraph.EDGE_THRES_PCT:g})")
    p.add_argument("--microbench-budget", type=float, default=15.0, metavar="S",
                   help="seconds for micro-benchmarks of the top operators at their shapes, 1 thread vs all "
                        "(15; 0 turns them off)")
    p.add_argument("--microbench-top", type=int, default=3, metavar="K",
                   help="how many of the top operators to micro-benchmark (3)")
    p.add_argument("--callgraph-focus", choices=("all", "user"), default="all",
                   help="call graph: all functions, or only those in your script's directory (all)")
    p.add_argument("--sweep", action="store_true",
                   help="re-run the workload at several intra-op thread counts (and DataLoader worker counts "
                        "when it has workers) and recommend a setting")
    p.add_argument("--sweep-threads", metavar="N,N,...",
                   help="thread counts to sweep (default: 1, 2, 4, ... up to the usable CPUs, and the target's own)")
    p.add_argument("--sweep-repeats", type=int, default=2, metavar="N",
                   help="interleaved runs per sweep point (2)")
    p.add_argument("--load", metavar="REPORT_JSON", help="re-render an existing report.json; runs nothing")
    p.add_argument("--format", choices=("terminal", "md", "json"), default="terminal",
                   help="with --load: what to print (terminal)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--version", action="version", version=f"diagnose {__version__}")
    return p


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _load(args) -> int:
    from diagnose.render import markdown, terminal
    from diagnose.report import io as report_io

    report = report_io.load(args.load)
    if args.format == "json":
        sys.stdout.write(report_io.dumps(report) + "\n")
    elif args.format == "md":
        sys.stdout.write(markdown.render(report))
    else:
        sys.stdout.write(terminal.render(report))
    return ExitCode.OK


def _run(args, extra: list[str], subcommand: str | None = None) -> int:
    from diagnose import api
    from diagnose.layers import LAYERS
    from diagnose.render import terminal
    from diagnose.render.progress import TerminalProgress
    from diagnose.target import Target, parse_target_spec

    if not args.target:
        raise UsageError("give a script to diagnose, e.g. diagnose train.py (see diagnose --help)")
    layers = [name.strip() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        raise UsageError(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(LAYERS)}")
    script, function = parse_target_spec(args.target)
    target = Target(script=script, argv=[*args.script_args, *extra], function=function,
                    warmup=args.warmup, iters=args.iters)
    config = api.Config(output_dir=args.output, force=args.force, timeout_s=args.timeout, layers=layers,
                        profile_iters=args.profile_iters, trace_max_events=args.trace_max_events,
                        callgraph={"node_thres_pct": args.callgraph_nodes, "edge_thres_pct": args.callgraph_edges,
                                   "focus": args.callgraph_focus})
    config.sweep, config.sweep_repeats = args.sweep, args.sweep_repeats
    if args.microbench_budget < 0 or args.microbench_top < 1:
        raise UsageError("--microbench-budget wants seconds >= 0 and --microbench-top a count >= 1")
    config.microbench_budget, config.microbench_top = args.microbench_budget, args.microbench_top
    if args.sweep_threads:
        try:
            config.sweep_threads = sorted({int(v) for v in args.sweep_threads.split(",") if v.strip()})
        except ValueError:
            raise UsageError(f"--sweep-threads wants numbers like 1,2,4, not {args.sweep_threads!r}") from None
        if not config.sweep_threads or min(config.sweep_threads) < 1:
            raise UsageError("--sweep-threads wants thread counts of at least 1")
        config.sweep = True
    if args.sweep_repeats < 1:
        raise UsageError("--sweep-repeats must be at least 1")
    if subcommand == "callgraph":
        config.layers, config.baseline = ["python"], False
    elif subcommand == "threads":
        config.layers = ["threads"]
    progress = api.NullProgress() if args.quiet else TerminalProgress()
    result = api.diagnose(target, config, progress)
    sys.stdout.write("\n" + terminal.render(result.report, result.output_dir))
    return result.exit_code


SUBCOMMANDS = ("callgraph", "threads")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "probe":  # machine peaks only: runs no target
        from diagnose.layers.efficiency import probe

        return probe.main(argv[1:])
    subcommand = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    own, extra = _split(argv[1:] if subcommand else argv)
    try:
        args = build_parser("diagnose " + subcommand if subcommand else "diagnose").parse_args(own)
        if args.load:
            return _load(args)
        return _run(args, extra, subcommand)
    except DiagnoseError as exc:
        print(f"diagnose: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("diagnose: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
