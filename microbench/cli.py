"""Command line: argparse only; options -> api calls -> print / write.

Exit codes: 0 ok; 2 bad usage or input (one line "microbench: error: ..." on
stderr, no traceback); 3 `compare --fail-on-slower` found a real slowdown;
1 an internal bug (traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from microbench import api, results
from microbench import compare as cmp_mod
from microbench.cases import parse_arg_overrides, parse_grid
from microbench.errors import UsageError
from microbench.grid import Grid, run_extras
from microbench.render import callgrind_tops, callgrind_tops_text, fuzz_text, results_table

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_SLOWER = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _threads(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 1,2; got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"thread counts must be >= 1, got {text!r}")
    return values


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _common_measure(p: argparse.ArgumentParser, budget: float) -> None:
    p.add_argument("--threads", type=_threads, default=None,
                   help="thread counts, e.g. 1,2 (default: 1, the configured intra-op count, the usable CPUs)")
    p.add_argument("--budget", type=_positive, default=budget, metavar="S",
                   help=f"total seconds; no new case starts after (default {budget:g})")
    p.add_argument("--max-run-time", type=_positive, default=2.0, metavar="S",
                   help="cap on each thread count's measured time, its turns summed (default 2)")
    p.add_argument("--threshold", type=_positive, default=0.1,
                   help="adaptive stops when every count's IQR/median < this (default 0.1)")
    p.add_argument("--json", metavar="OUT.json", help="write the results here")
    p.add_argument("--reproducers", metavar="DIR", help="write one standalone script per case here")
    p.add_argument("--callgrind", action="store_true",
                   help="also count instructions with valgrind (about 2 min per case; raise --budget)")
    p.add_argument("--autorange", choices=("adaptive", "blocked"), default="adaptive",
                   help="adaptive (stops at IQR/median < --threshold; default) or blocked (every count's turns "
                        "until --max-run-time is spent)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the shapes x threads grid (auto: when stdout is a terminal)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, no table")


def _spec(p: argparse.ArgumentParser, required: bool = True, several: bool = False) -> None:
    if several:
        p.add_argument("--shapes", required=required, action="append",
                       help='input shapes, e.g. "[32,1024,64],[32,64,1024]"; [] = scalar. Repeat for several '
                            'cases; symbols ("[M,K],[K,N]") are expanded over --grid')
        p.add_argument("--grid", action="append", metavar="NAME=v1,v2",
                       help="values of a symbol used in --shapes, e.g. --grid M=64,256 (repeatable: the "
                            "product of all is measured)")
    else:
        p.add_argument("--shapes", required=required,
                       help='input shapes, e.g. "[32,1024,64],[32,64,1024]"; [] = scalar')
    p.add_argument("--dtype", default=None, help="dtype of every tensor input (default float32)")
    p.add_argument("--dtypes", default=None, help="per input, e.g. float32,int64,scalar")
    p.add_argument("--arg", action="append", metavar="NAME=VALUE",
                   help="value of a non-tensor argument, e.g. --arg dim=0 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="microbench", description="Per-shape micro-benchmarks of PyTorch operators "
                     "(torch.utils.benchmark): thread sweeps, A/B comparison, reproducers.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    p = sub.add_parser("from-report", help="benchmark the top operators of a diagnose report.json")
    p.add_argument("report", metavar="REPORT.json")
    p.add_argument("--top", type=int, default=5, metavar="K", help="operators to benchmark (default 5)")
    _common_measure(p, budget=60.0)

    p = sub.add_parser("run", help="benchmark one operator at given shapes")
    p.add_argument("op", metavar="OP", help='e.g. "aten::bmm"')
    _spec(p, several=True)
    p.add_argument("--fuzz", type=int, default=0, metavar="N",
                   help="also measure N shapes drawn around the given one (torch.utils.benchmark.Fuzzer)")
    p.add_argument("--seed", type=int, default=0, help="--fuzz seed (default 0): same seed, same shapes")
    p.add_argument("--fuzz-spread", type=float, default=2.0, metavar="F",
                   help="each dimension d is drawn log-uniform in [d/F, d*F] (default 2)")
    _common_measure(p, budget=30.0)

    p = sub.add_parser("table", help="re-render a saved results file as a shapes x threads grid")
    p.add_argument("file", metavar="RESULTS.json")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument("--colorize", choices=("rowwise", "columnwise", "none"), default="rowwise",
                   help="compare the thread counts of each shape (rowwise, default) or the shapes at each "
                        "thread count (columnwise; best with --per-work)")
    p.add_argument("--per-work", action="store_true",
                   help="time per GFLOP (or per GB when the op has no FLOP count) instead of per call")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--top-functions", type=int, default=0, metavar="N",
                   help="also list each callgrind row's top N functions (standardized, exclusive)")

    p = sub.add_parser("compare", help="compare two results files, or A/B two settings here (--run)")
    p.add_argument("files", nargs="*", metavar="A.json B.json")
    p.add_argument("--min-floor-pct", type=float, default=5.0,
                   help="files: the noise floor is never below this (default 5)")
    p.add_argument("--fail-on-slower", action="store_true", help="files: exit 3 when B is really slower anywhere")
    p.add_argument("--run", metavar="OP", help="measure OP here in interleaved ABBA rounds")
    _spec(p, required=False)
    p.add_argument("--b-shapes", default=None,
                   help="--run: B's shapes when they differ from A's (--shapes), e.g. a planted 5%% larger K")
    p.add_argument("--top-functions", type=int, default=15, metavar="N",
                   help="files: callgrind functions listed by |delta| (default 15)")
    p.add_argument("--a-threads", type=int, default=1)
    p.add_argument("--b-threads", type=int, default=None, help="default: the configured intra-op count")
    p.add_argument("--a-dtype", default=None)
    p.add_argument("--b-dtype", default=None)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--block-ms", type=_positive, default=20.0, help="--run: ~ms per A or B slot (default 20)")
    p.add_argument("--sub-blocks", type=int, default=8, metavar="M",
                   help="--run: each slot is M timed sub-blocks and counts their fastest (default 8; 1 = one "
                        "block, as before)")
    p.add_argument("--ci", choices=("sign", "bootstrap", "signed-rank"), default="sign")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--min-effect-pct", type=float, default=1.0,
                   help="--run: effects below this are never called real (default 1)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--budget", type=_positive, default=60.0, metavar="S")
    p.add_argument("--json", metavar="OUT.json")
    p.add_argument("-q", "--quiet", action="store_true")
    return parser


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        raise UsageError("a command is required: from-report, run or compare (see: microbench --help)")

    progress = api._quiet if getattr(args, "quiet", False) else api.stderr_progress
    if getattr(args, "json", None):
        results.check_writable(args.json)
    if args.command in ("from-report", "run"):
        if args.command == "from-report":
            res = api.from_report(args.report, top=args.top, threads=args.threads, budget_s=args.budget,
                                  reproducers=args.reproducers, threshold=args.threshold,
                                  max_run_time=args.max_run_time, callgrind=args.callgrind, progress=progress,
                                  autorange=args.autorange)
        else:
            res = api.run(args.op, args.shapes, dtype=args.dtype, dtypes=args.dtypes,
                          args=parse_arg_overrides(args.arg), threads=args.threads, budget_s=args.budget,
                          reproducers=args.reproducers, threshold=args.threshold,
                          max_run_time=args.max_run_time, callgrind=args.callgrind, progress=progress,
                          grid=parse_grid(args.grid), fuzz=args.fuzz, seed=args.seed, spread=args.fuzz_spread,
                          autorange=args.autorange)
        if args.json:
            results.save(res, args.json)
        if not args.quiet:
            print(results_table(res))
            extra = run_extras(res, color=_color(args.color))
            if extra:
                print(extra)
            if args.json:
                print(f"Results: {args.json}")
            if args.reproducers:
                print(f"Reproducers: {args.reproducers}/")
        return EXIT_OK

    if args.command == "table":
        res = results.load(args.file)
        if not res.rows:
            raise UsageError(f"{args.file}: no measurements to tabulate")
        grid = Grid.from_results(res, colorize=args.colorize, per_work=args.per_work)
        if args.format == "json":
            data = grid.as_dict()
            if res.settings.get("fuzz"):
                data["fuzz_verdicts"] = res.fuzz_verdicts()
            if args.top_functions:
                data["callgrind"] = callgrind_tops(res, args.top_functions)
            print(json.dumps(data, indent=1))
        elif args.format == "markdown":
            print(grid.markdown())
            verdicts = fuzz_text(res)
            if verdicts:
                print("\n" + verdicts)
        else:
            print(grid.text(color=_color(args.color)))
            verdicts = fuzz_text(res)
            if verdicts:
                print("\n" + verdicts)
        if args.top_functions and args.format != "json":
            print("\n" + callgrind_tops_text(res, args.top_functions))
        return EXIT_OK

    # compare
    if args.run:
        if args.files:
            raise UsageError("compare takes either two results files or --run OP, not both")
        if not args.shapes:
            raise UsageError("compare --run needs --shapes")
        out = cmp_mod.compare_abba(args.run, args.shapes, b_shapes=args.b_shapes, dtype=args.dtype,
                                   dtypes=args.dtypes,
                                   args=parse_arg_overrides(args.arg), a_threads=args.a_threads,
                                   b_threads=args.b_threads, a_dtype=args.a_dtype, b_dtype=args.b_dtype,
                                   rounds=args.rounds, block_ms=args.block_ms, sub_blocks=args.sub_blocks,
                                   ci=args.ci,
                                   confidence=args.confidence, min_effect=args.min_effect_pct / 100.0,
                                   seed=args.seed, budget_s=args.budget, progress=progress)
        text = cmp_mod.render_abba(out)
        slower = False
    else:
        if len(args.files) != 2:
            raise UsageError("compare needs two results files (A.json B.json) or --run OP --shapes ...")
        out = cmp_mod.compare_files(args.files[0], args.files[1], min_floor=args.min_floor_pct / 100.0,
                                    top_functions=args.top_functions)
        text = cmp_mod.render_files(out)
        slower = any(r["real"] and r["verdict"] == "slower" for r in out["rows"])
    if args.json:
        results.write_json(out, args.json)
    if not args.quiet:
        print(text)
    return EXIT_SLOWER if (slower and getattr(args, "fail_on_slower", False)) else EXIT_OK


def _color(choice: str) -> bool:
    return choice == "always" or (choice == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except UsageError as e:
        print(f"microbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("microbench: error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception:  # noqa: BLE001 - anything else is our bug: say so, with the traceback
        traceback.print_exc()
        print("microbench: internal error (a bug; the traceback above helps)", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
