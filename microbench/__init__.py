"""microbench: per-shape micro-benchmarks of the operators a diagnose report flags.

Built on `torch.utils.benchmark` (Timer, collect_callgrind); a case's thread counts are measured
interleaved (measure.py).
Issue 5. Commands (``python -m microbench ...``):

  from-report REPORT.json [--top K] [--threads 1,2] [--budget S] [--json OUT.json] [--reproducers DIR]
  run OP --shapes "[32,1024,64],[32,64,1024]" [--shapes ...] [--grid M=64,256] [--fuzz N --seed S] ...
  table RESULTS.json [--format text|markdown|json]   (the shapes x threads grid of a saved file)
  compare A.json B.json                       (two saved results; noise floor from IQR/median)
  compare --run OP --shapes ... --a-threads 1 --b-threads 2   (ABBA rounds here; CI + noise floor)

Contract with `diagnose` (which runs us in a subprocess):

  python -m microbench from-report REPORT.json --top K --budget S --json OUT.json --reproducers DIR [-q]

exits 0 and writes OUT.json even when nothing could be measured (then
`measurements` is empty and `skipped`/`notes` say why); exits 2 with one line
"microbench: error: ..." on stderr for a missing/unreadable report or bad
options; 1 means a bug. The budget is wall time counted after torch is
imported; no new measurement starts once it is spent.

OUT.json (format_version 2; history in microbench/results.py; version 1 files still load):

  {
    "format": "microbench-results", "format_version": 2,
    "created": "2026-01-01T12:00:00+00:00",   # UTC
    "command": "from-report" | "run",
    "source_report": "/abs/path/report.json" | null,
    "machine": {cpu_model, logical_cpus, usable_cpus, torch_version, parallel_backend,
                intra_op_threads, inter_op_threads, threading_env{}, python_version, platform,
                report_machine{cpu_model, usable_cpus, intra_op_threads, torch_version}  # from-report only
               },
    "settings": {threads[], budget_s, threshold, max_run_time_s, callgrind, top?,
                 warmup_calls_after_thread_change, min_run_time_s,
                 autorange: "adaptive" | "blocked",
                 fuzz: {n, seed, spread, shapes[], rule} | null},   # rows at fuzz.shapes are the fuzzed ones
    "elapsed_s": float,
    "measurements": [            # one per (case, threads); cases in report order (self_pct), threads ascending
      {
        "op": "aten::mm", "overload": "default",
        "input_shapes": [[256, 1024], [1024, 1024]],   # as in the report's operators row ([] = scalar)
        "dtypes": ["float", "float"],                  # the report's (profiler) vocabulary
        "contiguous": true, "strides": null,           # strides per tensor input when not contiguous
        "layout": "contiguous (assumed: the report records no strides)",
        "threads": 2,
        "median_us": 3726.0, "iqr_us": 240.1,          # per call
        "runs": 9,                                     # measured blocks
        "number_per_run": 1,                           # calls per block
        "noise_pct": 6.4, "noisy": false,              # IQR/median*100; noisy at >= 10
        "flops": 536870912 | null,                     # per call, FlopCounterMode; null = unknown work
        "gflops_per_s": 144.1 | null,
        "bytes": 6291456,                              # inputs + outputs once: a LOWER BOUND on traffic
        "gbytes_per_s": 1.69,
        "speedup_vs_1_thread": 1.86 | null,            # median(1 thread) / median here; null without a 1-thread row
        "parallel_efficiency": 0.93 | null,            # speedup / threads
        "reference_speedup": 1.9 | null,               # the parallel reference beside it (measure.py), 1 -> here
        "turns_us": [...],                             # per-call median of each interleaved turn, in order
        "others_cpus": 0.1 | null,                     # CPUs other processes used meanwhile (/proc/stat, incl. steal)
        "contended": false,                            # others took CPUs these threads needed: do not trust
                                                       # this row's time or speedup (external contention)
        "source": "examples/mlp.py:30" | null, "self_pct": 9.5 | null,   # from the report row
        "reproducer": "01_mm_256x1024_1024x1024.py" | null,             # file name inside --reproducers DIR
        "assumed_args": {"beta": 1, "alpha": 1},       # non-tensor values the report did not record
        "stmt": "torch.ops.aten.mm.default(x0, x1)",
        "instructions_per_call": int | null, "callgrind_number": int | null,   # --callgrind, 1-thread row
        "times_us": [...]                              # per-call time of every measured block
      }
    ],
    "skipped": [                 # rows passed over and measurements not made, with why
      {"op", "input_shapes", "dtypes", "source", "self_pct",
       "threads": int | null,    # null: the whole row; int: that measurement (e.g. budget spent)
       "reason": "a TensorList input: the report records no member shapes",
       "reproducer"?: "..."}
    ],
    "notes": ["inputs were built contiguous: ...", "the time budget (60 s) ran out after 4 of 10 ..."],
    "callgrind": [               # --callgrind: function-level counts per case (1 thread)
      {"op", "input_shapes", "dtypes", "contiguous", "strides", "threads": 1,
       "number": 100, "total": 2572995,                # exclusive instructions of `number` calls
       "functions": [[287800, "???:...add_kernel..."], ...]}   # standardized, top 200 by count
    ],
    "fuzz_verdicts"?: [{threads, unit, verdict, why, ratio, ...}]   # with --fuzz; derived, not read back
  }

`diagnose` can join measurements to its operator rows on (op, input_shapes,
dtypes). A `sequential_operator` finding should read `parallel_efficiency` at
the largest thread count (e.g. aten::sort on a 1-D tensor: speedup ~1.0 at 2
threads), and must skip `contended` rows (on a shared 2-CPU machine, a
2-thread matmul measured 3x SLOWER than 1 thread while another job held one
CPU) and treat `noisy` rows with care.

Library use: `microbench.api.from_report(...)`, `api.run(...)` -> `Results`;
`microbench.compare.compare_files(...)`, `compare_abba(...)`; statistics in
`microbench.stats` (pure functions).
"""

from microbench.results import FORMAT, FORMAT_VERSION

__all__ = ["FORMAT", "FORMAT_VERSION"]
