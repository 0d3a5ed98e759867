"""report.html from committed and made-up reports: structure, escaping, embedded images, partial data.

The page itself (scripts, sorting, filtering, console errors) is checked in real
headless Chromium by tests/e2e/test_html_browser.py.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

from diagnose import findings
from diagnose.render import html
from diagnose.report import io
from diagnose.report.model import (Counters, Efficiency, Finding, LayerStatus, MicrobenchRow, OperatorRow, Peaks,
                                   Place, PythonFunction, Report, RooflineRow, Roofs, Run, SourceShare, Stake, Sweep,
                                   SweepPoint, SweepRecommendation, TargetInfo, Threads, VtuneSummary)

DATA = Path(__file__).resolve().parents[1] / "data"
# a 1x1 PNG
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def parse(page: str) -> Tags:
    t = Tags()
    t.feed(page)
    return t


def evil_report() -> Report:
    name = f"aten::{EVIL}"
    source = "models/a\"b' onmouseover=alert(1) <x>.py:7"
    r = Report(target=TargetInfo(script=f"my{EVIL}.py", argv=[EVIL]), run=Run(exit_code=0, wall_s=1.0,
                                                                              instrumented_wall_s=2.0))
    r.operators = [OperatorRow(name=name, input_shapes=[[3, 4]], dtypes=[EVIL], calls=2, self_cpu_us=50.0,
                               total_cpu_us=60.0, self_pct=100.0, source=source,
                               sources=[SourceShare(location=source, calls=2, self_cpu_us=50.0)])]
    r.python_hotspots = [PythonFunction(function=EVIL, location=source, kind="user", calls=1, self_s=0.5,
                                        cumulative_s=0.5, self_pct=50.0, cumulative_pct=50.0)]
    r.layers = {"operators": LayerStatus("ok"), "counters": LayerStatus("skipped", f"no counters: {EVIL}")}
    # the typed fields a finding is ranked and placed by, and a finding merged into it, carry user strings too
    merged = Finding("sequential_operator", "low", f"{EVIL} flat", name, source, {"odd": EVIL}, f"try {EVIL}",
                     "microbench", stake=Stake(10.0, EVIL), doubts=[EVIL], place=Place(EVIL, EVIL, EVIL))
    r.findings = [Finding("hot_operator", "high", f"{name} is hot", name, source, {"share_pct": 100.0, "odd": EVIL},
                          f"try {EVIL}", "operators", stake=Stake(50.0, EVIL, confidence=0.5, confidence_why=[EVIL]),
                          doubts=[EVIL], place=Place(EVIL, EVIL, EVIL), rule_severity=EVIL, severity_basis=EVIL,
                          severity_from=EVIL, also=[merged])]
    r.microbenchmarks = [MicrobenchRow(op=name, input_shapes=[[3, 4]], threads=1, median_us=3.0, iqr_us=0.03,
                                       noise_pct=1.0, source=source)]
    r.counters = Counters(source=EVIL, vtune=VtuneSummary(summary={EVIL: EVIL}))
    r.machine.cpu_model = EVIL
    r.machine.threading_env = {"OMP_NUM_THREADS": EVIL}
    return r


def test_strings_from_user_code_and_torch_are_inert():
    page = html.render(evil_report())
    tags = parse(page)
    # the only script is the page's own, the only images none (no files given), no handler attributes
    assert [t for t, _ in tags.tags].count("script") == 1 and "alert" not in "".join(tags.scripts)
    assert not [t for t, _ in tags.tags if t == "img" or t == "x"]
    assert not [a for _, attrs in tags.tags for a in attrs if a.startswith("on")]
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # attribute values stay whole: the filter index and sort keys carry the escaped name
    row = next(attrs for t, attrs in tags.tags if t == "tr" and attrs.get("id") == "op-0")
    assert row["data-search"].startswith("aten::<script>alert")  # (decoded by the parser, as a browser does)
    assert "<script>" not in page.split("<script>", 1)[0].split("</style>", 1)[1]


def test_sections_in_reading_order_with_the_verdict_first():
    rep = io.load(str(DATA / "compare" / "row_loop_before.json"))
    page = html.render(rep)
    ids = [attrs["id"] for t, attrs in parse(page).tags if t == "section"]
    assert ids == ["verdict", "operators", "modules", "python", "threads", "efficiency", "microbench", "doctor",
                   "what_if", "counters", "machine"]
    verdict = page.index('id="verdict"')
    assert verdict < page.index('id="finding-1"') < page.index('id="operators"')


def test_every_link_lands_on_an_anchor_of_the_page():
    rep = io.load(str(DATA / "compare" / "row_loop_before.json"))
    rep.findings = findings.derive(rep)
    tags = parse(html.render(rep)).tags
    ids = {attrs["id"] for _, attrs in tags if "id" in attrs}
    links = [attrs["href"] for t, attrs in tags if t == "a"]
    assert links and all(h.startswith("#") and h[1:] in ids for h in links), [h for h in links if h[1:] not in ids]
    # the top finding (the Python loop) merges the operators found at its line; each links to its evidence
    first = html.render(rep).split('id="finding-1"', 1)[1].split("</article>", 1)[0]
    assert "python_overhead" in first and "also at this line" in first
    assert 'href="#op-' in first and 'href="#python"' in first


def test_images_are_embedded_and_nothing_is_fetched(tmp_path):
    rep = io.load(str(DATA / "compare" / "row_loop_before.json"))
    for name in ("callgraph.png", "threads.png", "roofline.png"):
        (tmp_path / name).write_bytes(PNG)
    page = html.render(rep, str(tmp_path))
    srcs = [attrs["src"] for t, attrs in parse(page).tags if t == "img"]
    assert len(srcs) == 3 and all(s == "data:image/png;base64," + base64.b64encode(PNG).decode() for s in srcs)
    assert not re.search(r'(?:src|href)="(?!#|data:)', page)  # no URL to load, not even a favicon
    # without the files the sections still render, without images
    assert "<img" not in html.render(rep, str(tmp_path / "elsewhere"))


def test_noise_and_overhead_sit_next_to_each_measurement():
    rep = io.load(str(DATA / "compare" / "row_loop_before.json"))
    page = html.render(rep)
    sections = {m.group(1): m.group(2) for m in re.finditer(r'<section id="(\w+)">(.*?)</section>', page, re.S)}
    assert "IQR ±" in page.split('<nav>')[0]  # the run's wall time and its noise, at the top
    assert "instrumentation overhead" in sections["operators"]
    assert "cProfile pass" in sections["python"]
    assert "sampler cost" in sections["threads"]
    assert "instrumented operator pass" in sections["efficiency"]
    assert "skipped" in sections["counters"] and "perf stat" in sections["counters"]


def test_skipped_layers_show_their_reason_and_partial_data_does_not_break_the_page():
    r = Report(target=TargetInfo(script="m.py"), run=Run(exit_code=0, wall_s=1.0))
    r.layers = {"efficiency": LayerStatus("failed", "probe crashed"), "microbench": LayerStatus("skipped", "budget 0")}
    r.efficiency = Efficiency(peaks=Peaks(), roofs=Roofs(threads=1, gflops_per_s=None, gb_per_s=None,
                                                        ridge_flop_per_byte=None),
                              operators=[RooflineRow(name="aten::mm", input_shapes=[], dtypes=[]),
                                         RooflineRow(name="junk", input_shapes=[], dtypes=[], efficiency_pct="junk")])
    r.threads = Threads(sweep=Sweep(
        threads=[SweepPoint(1, median_s=0.5, throughput_per_s=2.0, spread_pct=4.0, runs_s=[0.5, 0.51]),
                 SweepPoint(2, median_s=0.3, throughput_per_s=3.3, spread_pct=2.0, runs_s=[0.3, 0.31])],
        recommendation=SweepRecommendation(code="torch.set_num_threads(2)", env="OMP_NUM_THREADS=2",
                                           gain_vs_configured_pct=0.0),
        tolerance_pct=5, configured_threads=2, unit="runs"))
    page = html.render(r)
    sections = {m.group(1): m.group(2) for m in re.finditer(r'<section id="(\w+)">(.*?)</section>', page, re.S)}
    assert "<b>failed</b>: probe crashed" in sections["efficiency"]
    assert "<b>skipped</b>: budget 0" in sections["microbench"]
    assert "not run" in sections["operators"] and "No findings" in sections["verdict"]
    assert "Thread sweep" in sections["threads"] and "recommended: torch.set_num_threads(2)" in sections["threads"]
    assert "could not draw" in sections["efficiency"]  # the junk row: said, not raised
    assert sections["machine"].count("<tr>") >= 8


def test_the_operator_table_is_sortable_with_numeric_keys():
    rep = io.load(str(DATA / "compare" / "row_loop_before.json"))
    tags = parse(html.render(rep)).tags
    heads = [attrs.get("data-type") for t, attrs in tags if t == "th" and "data-type" in attrs]
    assert heads == ["text", "text", "text", "num", "num", "num", "num", "num", "num", "num", "text", "text", "text"]
    rows = [attrs for t, attrs in tags if t == "tr" and attrs.get("id", "").startswith("op-")]
    assert len(rows) == len(rep.operators)
    first_cells = [attrs for t, attrs in tags if t == "td" and "data-v" in attrs][:13]
    assert float(first_cells[4]["data-v"]) == rep.operators[0].self_cpu_us


def test_the_nav_counts_every_finding_coloured_by_the_worst():
    r = Report(target=TargetInfo(script="m.py"), run=Run(exit_code=0, wall_s=1.0))
    nav = lambda: html.render(r).split("<nav>", 1)[1].split("</nav>", 1)[0]  # noqa: E731
    assert 'href="#verdict">Verdict</a>' in nav()  # no findings: no pill
    r.findings = [Finding(kind="memory_churn", severity="low", title="t", op=None, location=None, evidence={},
                          suggestion="s", layer="operators")]
    assert 'Verdict <span class="pill sev-low">1</span>' in nav()
    r.findings.append(Finding(kind="hot_operator", severity="medium", title="t", op=None, location=None,
                              evidence={}, suggestion="s", layer="operators"))
    assert 'Verdict <span class="pill sev-medium">2</span>' in nav()


def test_a_torchrun_job_gets_its_ranks_section_after_the_verdict():
    rep = io.load(str(DATA / "distributed" / "node0" / "report.json"))
    page = html.render(rep)
    ids = [attrs["id"] for t, attrs in parse(page).tags if t == "section"]
    assert ids[:2] == ["verdict", "ranks"] and 'href="#ranks"' in page
    ranks = re.search(r'<section id="ranks">(.*?)</section>', page, re.S).group(1)
    for e in rep.distributed.ranks:
        assert f"<td class=num>{e.rank}</td>" in ranks
    assert "collectives" in ranks and "world size" in ranks
    verdict = re.search(r'<section id="verdict">(.*?)</section>', page, re.S).group(1)
    for o in rep.distributed.observations:  # the straggler and collectives, read first, linked to the ranks
        assert f"<b>{o.kind}</b>: {html._e(o.title)} <a href=\"#ranks\">" in verdict
    assert 'id="ranks"' not in html.render(io.load(str(DATA / "compare" / "row_loop_before.json")))
