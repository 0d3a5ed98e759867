"""PNG pictures drawn from the report (never from a profiler): threads.png, roofline.png, memory.png,
flamegraph.png, budget.png.

matplotlib with the Agg backend (no display needed); each function returns
None when it drew the picture, else the reason it could not.
"""

from __future__ import annotations

import os
from typing import Any

from diagnose.render import fmt
from diagnose.report.model import Report, RooflineRow, ThreadProcess

MAX_PROCESSES_DRAWN = 6  # the rest are summed into "other processes"
LABEL_GAP_PX = 13  # roofline.png: vertical room per operator label (8 pt text at 100 dpi)


def preload() -> None:
    """Import matplotlib ahead of drawing (about 0.7 s), when nothing is being measured; a no-op once imported."""
    try:
        _pyplot()
    except ImportError:
        pass


def draw_all(report: Report, jobs: list[tuple[Any, str]]) -> list[str | None]:
    """Each `draw(report, path)` of `jobs`, the reason it could not be drawn or None.

    With more than one CPU, every picture but the last is drawn in a forked child while this process draws
    the last (matplotlib is single-threaded; the roofline alone takes ~0.7 s). Nothing is measured while a
    report is written. A child that cannot start or dies falls back to drawing here. matplotlib is imported
    here first, so that the children inherit it instead of each importing it again (0.7 s of CPU each: with
    five pictures, 2.5-2.9 s of wall and 5-5.7 s of CPU became 1.4 s and 2.3 s on a 2-CPU machine).
    """
    import json

    if jobs:
        preload()

    def one(draw, path) -> str | None:
        try:
            return draw(report, path)
        except Exception as exc:  # noqa: BLE001 - a picture must not take the report down
            return f"drawing it failed: {type(exc).__name__}: {exc}"

    children: dict[int, tuple[int, int]] = {}  # job index -> (pid, the pipe's read end)
    parallel = len(jobs) > 1 and hasattr(os, "fork") and len(os.sched_getaffinity(0)) > 1
    for i, (draw, path) in enumerate(jobs[:-1] if parallel else []):
        try:
            r, w = os.pipe()
            pid = os.fork()
        except OSError:
            continue  # drawn here below
        if pid == 0:  # the child: draw, say why not (or null), and leave without running the parent's exit code
            code = 1
            try:
                os.close(r)
                os.write(w, json.dumps(one(draw, path)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        children[i] = (pid, r)
    whys = [None if i in children else one(draw, path) for i, (draw, path) in enumerate(jobs)]
    for i, (pid, r) in children.items():
        with os.fdopen(r, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(pid, 0)
        whys[i] = json.loads(data) if status == 0 and data else one(*jobs[i])
    return whys


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(pid: int, p: ThreadProcess | None) -> str:
    role = ((p.role if p else None) or "process").replace("_", " ")
    return f"{role} {pid}"


def threads_png(report: Report, path: str) -> str | None:
    t = report.threads
    timeline = t.timeline if t else None
    xs = timeline.t_s if timeline else []
    if t is None or timeline is None or len(xs) < 2:
        return "the thread sampler took too few samples to draw a timeline"
    try:
        plt = _pyplot()
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    usable = t.usable_cpus or report.machine.usable_cpus
    info = {p.pid: p for p in t.processes}
    series = sorted(timeline.processes, key=lambda s: -sum(v or 0 for v in s.cpu_used))
    drawn, rest = series[:MAX_PROCESSES_DRAWN], series[MAX_PROCESSES_DRAWN:]
    labels = [_label(s.pid, info.get(s.pid)) for s in drawn]

    def stack(key: str) -> list[list[float]]:
        rows = [[v or 0.0 for v in getattr(s, key) or [0.0] * len(xs)] for s in drawn]
        if rest:
            rows.append([sum((getattr(s, key) or [0.0] * len(xs))[i] or 0.0 for s in rest) for i in range(len(xs))])
        return rows

    if rest:
        labels.append(f"{len(rest)} other processes")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    top.stackplot(xs, stack("runnable"), labels=labels, step="pre", alpha=0.85)
    bottom.stackplot(xs, stack("cpu_used"), labels=labels, step="pre", alpha=0.85)
    busy = timeline.machine_busy_cpus
    if busy and any(v is not None for v in busy):
        bottom.step(xs, [v if v is not None else float("nan") for v in busy], where="pre", color="black",
                    linewidth=1, linestyle=":", label="whole machine busy")
    for ax in (top, bottom):
        if usable:
            ax.axhline(usable, color="crimson", linewidth=1.5, linestyle="--", label=f"usable CPUs ({usable})")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    top.set_ylabel("runnable threads")
    bottom.set_ylabel("CPUs used")
    st = report.steps
    if st is not None and st.window_first is not None:
        bottom.set_xlabel(f"seconds since the window began (steps {st.window_first}-{st.window_last}; "
                          "setup and warm-up not shown)")
    else:
        bottom.set_xlabel("seconds since the measured workload began")
    wait = t.runqueue_wait_share
    title = f"Threads of {report.target.script}: mean runnable {t.mean_runnable or 0:.2f} on {usable} usable CPUs"
    if wait is not None:
        title += f", run-queue wait {wait * 100:.0f}% of runnable time"
    top.set_title(title, fontsize=10)
    top.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _op_label(op: RooflineRow) -> str:
    shapes = " ".join(str(s).replace(" ", "") for s in (op.input_shapes or []) if s)
    name = (op.name or "").replace("aten::", "")
    return f"{name} {shapes}" if len(shapes) <= 34 else f"{name} {shapes[:33]}…"


def roofline_png(report: Report, path: str) -> str | None:
    """Log-log roofline: the measured roofs and each hot operator placed at its intensity."""
    eff = report.efficiency
    if eff is None:
        return "no machine peaks were measured (the efficiency layer did not run or failed)"
    roofs = eff.roofs
    peak, bw = roofs.gflops_per_s, roofs.gb_per_s
    ops = [o for o in eff.operators if o.intensity_flop_per_byte and o.achieved_gflops_per_s]
    if not (peak and bw):
        return "no machine peaks were measured (the efficiency layer did not run or failed)"
    if not ops:
        return "no hot operator has both a FLOP count and a byte estimate to place on the roofline"
    try:
        plt = _pyplot()
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    ridge = peak / bw
    xs = [o.intensity_flop_per_byte for o in ops]
    ys = [o.achieved_gflops_per_s for o in ops]
    shares = [float(o.share_pct or 0) for o in ops]
    x_lo, x_hi = min(min(xs), ridge) / 8, max(max(xs), ridge) * 8
    y_lo, y_hi = min(min(ys), x_lo * bw) / 3, peak * 3
    fig, ax = plt.subplots(figsize=(11, 7))
    # fixed margins, not a layout engine: the labels below are placed in pixels, which needs the final layout
    # before the figure is drawn (a layout engine would need a full extra draw, ~0.4 s)
    fig.subplots_adjust(left=0.075, right=0.985, bottom=0.085, top=0.95)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak, x * bw) for x in grid], color="black", linewidth=2,
            label=f"roof: memory {bw:.3g} GB/s (copy/triad) x intensity, capped by the GEMM peak")
    for frac, style in ((0.25, "--"), (0.10, ":")):  # the low_efficiency finding's thresholds
        ax.plot(grid, [frac * min(peak, x * bw) for x in grid], color="crimson", linewidth=0.8, linestyle=style,
                alpha=0.6, label=f"{frac:.0%} of the roof (low_efficiency below)")
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    to_px = ax.transData.transform
    raised = f" (a kernel of the run; probed {roofs.probed_gflops_per_s:.3g})" if roofs.raised_by else ""
    ax.annotate(f"fp32 GEMM peak {peak:.3g} GFLOP/s at {roofs.threads} thread"
                f"{'s' if roofs.threads != 1 else ''}{raised}", xy=(x_hi, peak), fontsize=9, ha="right",
                xytext=(-6, 5), textcoords="offset points")
    ax.annotate(f"ridge {ridge:.2g} FLOP/B", xy=(ridge, y_hi), fontsize=8, color="grey", ha="left", va="top",
                xytext=(4, -6), textcoords="offset points")
    colors = ["tab:blue" if o.bound == "compute" else "tab:orange" for o in ops]
    ax.scatter(xs, ys, s=[40 + 12 * s for s in shares], c=colors, alpha=0.75, edgecolors="black",
               linewidths=0.6, zorder=3)
    # labels in two columns (points in the right half labelled to their left, the others to their right),
    # each column top-down at least LABEL_GAP_PX apart so that clustered kernels stay readable
    mid_px = (to_px((x_hi, y_hi))[0] + to_px((x_lo, y_lo))[0]) / 2
    bottom_px = to_px((x_lo, y_lo))[1]
    for left in (True, False):
        idx = sorted((i for i in range(len(ops)) if (to_px((xs[i], ys[i]))[0] > mid_px) == left),
                     key=lambda i: -to_px((xs[i], ys[i]))[1])
        label_y: list[float] = []
        for i in idx:
            py = to_px((xs[i], ys[i]))[1]
            label_y.append(min(py, label_y[-1] - LABEL_GAP_PX) if label_y else py)
        lift = max(0.0, bottom_px + LABEL_GAP_PX - label_y[-1]) if label_y else 0.0
        pxs = [to_px((xs[i], ys[i]))[0] for i in idx]
        edge = (min(pxs) - 16 if left else max(pxs) + 16) if pxs else 0.0  # clear of the whole column's points
        for i, ly in zip(idx, label_y):
            op = ops[i]
            px, py = to_px((xs[i], ys[i]))
            note = ", in cache" if op.cache_resident else ""
            ax.annotate(f"{_op_label(op)}: {shares[i]:.0f}% of op time, {op.efficiency_pct:.3g}% of roof"
                        f"{note}", xy=(xs[i], ys[i]), xytext=(edge - px, ly + lift - py),
                        textcoords="offset pixels", fontsize=8, ha="right" if left else "left", va="center",
                        arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5})
    ax.scatter([], [], c="tab:blue", label="compute-bound operator (area: share of operator time)")
    ax.scatter([], [], c="tab:orange", label="memory-bound operator")
    ax.set_xlabel("arithmetic intensity, FLOP per byte (bytes = inputs read + outputs written once: a lower bound)")
    ax.set_ylabel("achieved GFLOP/s (operator pass, self CPU time)")
    overhead = eff.instrumentation_overhead
    title = f"Roofline of {report.target.script} on {report.machine.cpu_model or 'this machine'}"
    if overhead:
        title += f" (times from the instrumented pass, {overhead:.2f}x the plain run)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper left", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def memory_png(report: Report, path: str) -> str | None:
    """memory.png: the window's steps, the RSS above (with its least-squares line) and torch's bytes below,
    stacked by what holds them (parameters, gradients, optimizer state, what the window allocated and kept)."""
    mem = report.memory
    rss = mem.rss.readings_bytes if mem and mem.rss else []
    live = mem.allocator.readings_bytes if mem and mem.allocator else []
    if len(rss) < 2 and len(live) < 2:
        return "fewer than two memory readings in the window"
    try:
        plt = _pyplot()
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    first = report.steps.window_first if report.steps and report.steps.window_first else 1
    mib = float(1 << 20)
    every = mem.rss.interval_s if mem and mem.rss else None  # diagnose attach: readings over time, not steps
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    if len(rss) >= 2:
        xs = [i * every for i in range(len(rss))] if every else [first - 1 + i for i in range(len(rss))]
        top.plot(xs, [v / mib for v in rss], marker=".", color="tab:blue",
                 label="RSS of the process tree (attached)" if every else "RSS (uninstrumented pass)")
        s = mem.rss.slope
        if s is not None:
            mid_x, mid_y = sum(xs) / len(xs), sum(rss) / len(rss)
            per_x = s.bytes_per_step / every if every else s.bytes_per_step
            k = 1 / every if every else 1
            top.plot(xs, [(mid_y + per_x * (x - mid_x)) / mib for x in xs], color="black", linewidth=0.8,
                     linestyle="--", label=f"least squares: {k * s.bytes_per_step / mib:.2f} MiB/"
                                           f"{'s' if every else 'step'} [{k * s.ci_low / mib:.2f}, "
                                           f"{k * s.ci_high / mib:.2f}]")
        top.legend(loc="upper left", fontsize=8)
    top.set_ylabel("RSS (MiB)")
    top.grid(True, alpha=0.3)
    peak = mem.peak
    bands = [(name, (v or 0) / mib) for name, v in (
        ("parameters", peak.parameters_bytes if peak else None), ("gradients", peak.gradients_bytes if peak else None),
        ("optimizer state", peak.optimizer_state_bytes if peak else None)) if v]
    n = len(live) if len(live) >= 2 else len(rss)
    xs = [first - 1 + i for i in range(n)]
    series = [[v] * n for _, v in bands] + ([[v / mib for v in live]] if len(live) >= 2 else [])
    labels = [name for name, _ in bands] + (["allocated in the window and still alive (operator pass; gradients "
                                             "re-made each step count here too)"] if len(live) >= 2 else [])
    if series:
        bottom.stackplot(xs, series, labels=labels, alpha=0.85, step="post")
        bottom.legend(loc="upper left", fontsize=8)
    else:
        bottom.text(0.5, 0.5, "torch's bytes were not recorded (no operator pass, no module or optimizer)",
                    ha="center", va="center", transform=bottom.transAxes, fontsize=9)
    bottom.set_ylabel("torch tensors (MiB)")
    bottom.set_xlabel("seconds since attaching" if every else "step (the window's start, then the end of each of its steps)")
    bottom.grid(True, alpha=0.3)
    if not every:
        bottom.xaxis.get_major_locator().set_params(integer=True)
    grows = [g.source for g in (mem.rss, mem.allocator) if g is not None and g.continues]
    verdict = ("grows through the window (" + " and ".join("RSS" if x == "rss" else "torch's bytes" for x in grows)
               + ")") if grows else "no growth through the window"
    top.set_title(f"Memory of {report.target.script} over the window's steps: {verdict}", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# one colour per step-budget slice (diagnose/budget.py ORDER), shared with report.html's bar
SLICE_COLOURS = {"kernels": "#4c78a8", "dispatch": "#f58518", "python": "#e45756", "native": "#b279a2",
                 "data": "#72b7b2", "allocator": "#eeca3b", "waiting": "#9d755d", "unexplained": "#bab0ac"}


def budget_png(report: Report, path: str) -> str | None:
    """budget.png: the step budget as one stacked bar (each slice's share of the uninstrumented median step),
    and below it a bar per module (the top modules' own operators as a share of the step) when the model has
    several."""
    b = report.step_budget
    if b is None or not b.slices:
        return "no step budget (nothing timed the step)"
    try:
        plt = _pyplot()
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    modules = fmt.budget_modules(report)
    # fixed axes in inches, not a layout engine: the module labels take the left of their own axes only, and
    # the budget's bar keeps the whole width
    bar_h, row_h, gap = 1.9, 0.3, 0.45
    height = bar_h + (gap + row_h * len(modules) + 0.55 if modules else 0.0)
    fig = plt.figure(figsize=(10, height))
    ax = fig.add_axes((0.03, 1 - 1.25 / height, 0.94, 0.8 / height))
    left = 0.0
    for s in b.slices:
        width = max(0.0, s.share) * 100
        if not width:
            continue
        ax.barh(0, width, left=left, color=SLICE_COLOURS.get(s.name, "grey"), edgecolor="white",
                label=f"{s.name} {100 * s.share:.0f}%")
        if width >= 6:
            ax.text(left + width / 2, 0, f"{s.name}\n{100 * s.share:.0f}%", ha="center", va="center", fontsize=8,
                    color="white" if s.name in ("kernels", "python", "native", "waiting") else "black")
        left += width
    ax.set_xlim(0, max(100.0, left))
    ax.set_yticks([])
    ax.set_xlabel(f"share of the uninstrumented median {b.unit} (%)")
    over = f"; the slices over-count by {-100 * b.unexplained_share:.0f}%" if b.unexplained_share < 0 else ""
    ax.set_title(f"Step budget of {report.target.script}: {b.unit} {fmt.duration(b.step_s)}{over}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=min(8, len(b.slices)), fontsize=8,
              frameon=False)
    if modules:
        mx = fig.add_axes((0.42, 0.55 / height, 0.53, row_h * len(modules) / height))
        labels = [label if len(label) <= 60 else "…" + label[-59:] for label, _ in modules]
        shares = [100 * share for _, share in modules]
        mx.barh(range(len(modules)), shares, color=SLICE_COLOURS["kernels"], alpha=0.8)
        mx.set_yticks(range(len(modules)), labels, fontsize=8)
        mx.invert_yaxis()
        for i, v in enumerate(shares):
            mx.text(v, i, f" {v:.1f}%", va="center", fontsize=8)
        mx.set_xlim(0, max(shares) * 1.15)
        mx.set_title(f"by module: the share of the {b.unit} in each module's own operators (%)", fontsize=9)
        mx.grid(True, axis="x", alpha=0.3)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


FLAME_MIN_FRACTION = 0.002  # frames narrower than this share of the total are not drawn
FLAME_ROW_IN = 0.24


def flame_png(report: Report, path: str) -> str | None:
    """flamegraph.png: report.stacks as a flame graph, the user's lines at the bottom, operators on top.

    Drawn with matplotlib, which the project already uses for its other
    pictures: flamegraph.pl would need Perl and writes SVG, which the report
    cannot embed as an image everywhere; speedscope reads stacks.folded for an
    interactive view. Each frame's width is its share of the operator pass's
    self CPU time; colours tell user lines, modules and operators apart.
    """
    stacks = [s for s in report.stacks if s.self_cpu_us > 0]
    if not stacks:
        return "the operator pass recorded no operator time to draw"
    try:
        plt = _pyplot()
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    total = sum(s.self_cpu_us for s in stacks)
    tree: dict[str, Any] = {"w": 0.0, "c": {}}
    for s in stacks:
        node = tree
        node["w"] += s.self_cpu_us
        for frame in s.frames:
            node = node["c"].setdefault(frame, {"w": 0.0, "c": {}})
            node["w"] += s.self_cpu_us
    depth = max(len(s.frames) for s in stacks)
    fig_h = max(2.5, 1.0 + depth * FLAME_ROW_IN)
    fig, ax = plt.subplots(figsize=(12, fig_h), constrained_layout=True)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, depth)
    ax.axis("off")
    colours = {"line": "#e8a05c", "module": "#8fb8de", "op": "#e06c5f"}
    width_px = fig.get_size_inches()[0] * fig.dpi

    def draw(node: dict[str, Any], x0: float, level: int) -> None:
        x = x0
        for frame, child in sorted(node["c"].items(), key=lambda kv: -kv[1]["w"]):
            w = child["w"] / total
            if w < FLAME_MIN_FRACTION:
                x += w
                continue
            kind = "line" if level == 0 else ("op" if not child["c"] and "::" in frame else "module")
            ax.add_patch(Rectangle((x, level), w, 0.95, facecolor=colours[kind], edgecolor="white", linewidth=0.5))
            chars = int(w * width_px / 6.5)
            if chars >= 4:
                text = f"{frame} {100 * w:.0f}%"
                ax.text(x + 0.002, level + 0.45, text if len(text) <= chars else text[:chars - 1] + "…",
                        va="center", ha="left", fontsize=7, clip_on=True)
            draw(child, x, level + 1)
            x += w

    draw(tree, 0.0, 0)
    ax.set_title(f"Operator time of {report.target.script} by your line, module and operator "
                 "(width: share of self CPU time in the operator pass)", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
