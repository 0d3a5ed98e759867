"""The memory layer through the real CLI on the gallery's planted memory problems (examples/README.md).

Each example keeps a known number of bytes a step (the test computes them from the tensor sizes the script
declares); diagnose runs with `--layers operators` (the uninstrumented pass reads the RSS, the operator pass
torch's allocations) over its default window, the script asked for more steps than any machine fits in that
window (it lasts >= 1 s: on a fast machine the examples' own defaults would end inside it), so the passes end it
after the window. What is asserted:
- the growth per step in memory_growth's evidence is within 20% of the bytes the script keeps (torch's live
  bytes are exact: the margin covers a step's boundary falling inside the allocation pattern);
- >= 1 MiB a step is detected inside the default window, by the RSS too (its interval above 0);
- the finding is at the line that keeps the memory, with the fix that matches what holds it;
- the projection reads the script's length from its loop;
- a clean training loop (examples/mlp.py) gets no memory_growth.
None of it depends on CPU load: the byte counts are the same on a busy machine (PARALLEL_SAFE).
"""

from __future__ import annotations

import pytest

from conftest import EXAMPLES, line_of, run_cli

MIB = 1 << 20
FLOAT = 4


def _line(script: str, needle: str) -> str:
    return f"examples/{script}:{line_of(EXAMPLES / script, needle)}"


def _diagnose(tmp_path, script: str, *args: str) -> dict:
    run = run_cli("--layers", "operators", f"examples/{script}", *args, outdir=tmp_path / "r")
    assert run.code == 0, run.stderr[-3000:]
    assert (run.outdir / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (run.outdir / "report.md").read_text()
    assert "## Memory" in md and "memory.png" in md
    assert 'id="memory"' in (run.outdir / "report.html").read_text()
    return run.report


def _growth(r: dict) -> dict:
    """The one memory_growth, named first at its line where other layers' findings merged into it (the cat)."""
    found = [f for f in r["findings"] if f["kind"] == "memory_growth"]
    assert len(found) == 1, [(f["kind"], f["title"], [a["kind"] for a in f["also"]]) for f in r["findings"]]
    return found[0]


def _check_rate(r: dict, f: dict, kept_bytes: float, total_steps: int) -> None:
    ev = f["evidence"]
    assert ev["source"] == "allocator" and abs(ev["growth_per_step_bytes"] - kept_bytes) <= 0.2 * kept_bytes, ev
    assert ev["ci_low_bytes"] > 0 and ev["late_half_per_step_bytes"] >= 0.5 * ev["growth_per_step_bytes"], ev
    mem = r["memory"]
    # the rule followed from the section's numbers: both readings grow through the window
    assert mem["allocator"]["continues"] and mem["rss"]["continues"], (mem["allocator"]["verdict"], mem["rss"]["verdict"])
    assert mem["rss"]["slope"]["ci_low"] >= 0.5 * MIB  # >= 1 MiB a step shows in the RSS of the default window
    window = r["steps"]["window_last"] - r["steps"]["window_first"] + 1
    assert len(mem["rss"]["readings_bytes"]) == window + 1 and len(mem["allocator"]["readings_bytes"]) == window
    assert r["steps"]["ended_target"]  # the window ended inside the script's loop
    p = mem["projection"]
    assert p["total_steps"] == total_steps and "range(args.steps)" in p["basis"], p
    assert p["more_bytes"] == pytest.approx(mem["rss"]["slope"]["bytes_per_step"] * (total_steps - p["step_at_window_end"]),
                                            rel=1e-3)
    share = p["more_bytes"] / p["headroom_bytes"]
    expected = "high" if share >= 1 else "medium" if share >= 0.25 else "low"
    assert f["severity"] == expected or f.get("severity_from"), (f["severity"], share, f.get("severity_from"))


def test_outputs_kept_with_their_graph(tmp_path):
    r = _diagnose(tmp_path, "keep_graph.py", "--", "--steps", "2000")
    f = _growth(r)
    batch, hidden = 256, 1024  # the output and the ReLU output its graph saved, each [256, 1024] floats
    _check_rate(r, f, 2 * batch * hidden * FLOAT, total_steps=2000)
    assert f["location"] == _line("keep_graph.py", "outputs.append(out)  #")
    assert f["evidence"]["holder"] == "list outputs" and f["evidence"]["grad_fn"] == "AddmmBackward0"
    sites = {s["held_by"] for s in f["evidence"]["sites"]}
    assert sites == {"container", "autograd graph"}, f["evidence"]["sites"]
    assert ".detach()" in f["suggestion"] and "inference_mode" in f["suggestion"]


def test_a_list_of_loss_tensors(tmp_path):
    r = _diagnose(tmp_path, "loss_list.py", "--", "--steps", "2000")
    f = _growth(r)
    batch, hidden, classes = 256, 1024, 16  # saved: the ReLU output and cross-entropy's log-softmax
    _check_rate(r, f, (batch * hidden + batch * classes) * FLOAT, total_steps=2000)
    assert f["location"] == _line("loss_list.py", "losses.append(loss)  #")
    assert f["evidence"]["holder"] == "list losses" and f["evidence"]["grad_fn"] == "NllLossBackward0"
    assert ".item()" in f["suggestion"]


def test_a_cache_dict_that_grows(tmp_path):
    r = _diagnose(tmp_path, "growing_cache.py", "--", "--steps", "2000")
    f = _growth(r)
    _check_rate(r, f, 256 * 1024 * FLOAT, total_steps=2000)
    assert f["location"] == _line("growing_cache.py", "cache[step] = features  #")
    ev = f["evidence"]
    assert ev["held_by"] == "container" and ev["holder"] == "dict cache" and ev["grad_fn"] is None
    assert "lru_cache" in f["suggestion"] or "maxlen" in f["suggestion"]


def test_a_torch_cat_buffer_grown_each_step(tmp_path):
    r = _diagnose(tmp_path, "cat_buffer.py", "--", "--steps", "1000")
    f = _growth(r)
    _check_rate(r, f, 256 * 1024 * FLOAT, total_steps=1000)
    line = _line("cat_buffer.py", "buffer = torch.cat([buffer, out])  #")
    assert f["location"] == line and f["evidence"]["grown_buffer"], f["evidence"]
    assert "preallocate" in f["suggestion"]
    buffer = next(g for g in r["memory"]["retained"]["groups"] if g["grown_buffer"])
    assert buffer["op"] == "aten::cat" and buffer["source"] == line
    # the list's real shapes (issue 31), which the profiler records as none: the buffer grows by the 256-row piece
    # at every call, the piece stays [256, 1024]
    cat = next(o for o in r["operators"] if o["name"] == "aten::cat" and o["source"] == line)
    assert cat["dtypes"][0] == "TensorList" and cat["input_shapes"][0] == [], cat
    (listed,) = cat["list_inputs"]
    assert listed["index"] == 0 and listed["tensors"] == listed["last_tensors"] == 2 and listed["calls"] == cat["calls"]
    (first, piece), (last, last_piece) = listed["shapes"], listed["last_shapes"]
    assert piece == last_piece == [256, 1024] and first[1] == last[1] == 1024, listed
    assert last[0] - first[0] == 256 * (cat["calls"] - 1), listed
    shown = f"[[{first[0]}..{last[0]},1024],[256,1024]]"
    assert shown in (tmp_path / "r" / "report.md").read_text()
    named = [g for f in r["findings"] for g in (f, *f["also"]) if g["op"] == "aten::cat" and g["kind"] == "hot_operator"]
    assert named and all(shown in g["title"] and "scalars" not in g["title"] for g in named), named
    # the cat's input grows by the 1 MiB piece a step (exact: the source mode counts the list's bytes), projected
    # to the script's --steps 1000: quadratic copying, with the fix
    (growth,) = [g for f in r["findings"] for g in (f, *f["also"]) if g["kind"] == "input_growth"]
    ev = growth["evidence"]
    assert growth["location"] == line and growth["op"] == "aten::cat" and ev["function"] == "cat", growth
    assert ev["bytes_per_step"] == 256 * 1024 * FLOAT and ev["ci_low"] > 0, ev
    assert ev["total_steps"] == 1000 and ev["projected_ratio"] > 10, ev
    assert ev["projected_ratio"] == round((ev["input_bytes"][-1] + ev["bytes_per_step"] * (1000 - ev["step_at_window_end"]))
                                          / ev["mean_input_bytes"], 1), ev
    assert "1.00 MiB a step (quadratic copying)" in growth["title"] and "step 1000" in growth["title"], growth
    # the rule calls it high (a call at the script's end takes > 10x the window's); the severity shown is then
    # bounded by the expected time at stake, the cat's share of this run's time, which the machine's load moves
    assert (growth.get("rule_severity") or growth["severity"]) == "high", growth
    assert growth["severity"] == "high" or growth["severity_basis"], growth
    assert "collect the pieces in a list" in growth["suggestion"], growth


def test_a_clean_training_loop_has_no_memory_growth(tmp_path):
    r = _diagnose(tmp_path, "mlp.py", "--", "--steps", "60")
    assert not [f for f in r["findings"] if f["kind"] == "memory_growth"], r["findings"]
    mem = r["memory"]
    assert not mem["allocator"]["continues"], mem["allocator"]["verdict"]
    assert not [g for g in mem["retained"]["groups"] if g["bytes_per_step"] > 0], mem["retained"]["groups"][:3]
    # the peak's parts read from the tensors: the MLP's parameters, and as many bytes of gradients after SGD
    params = (512 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10) * FLOAT
    peak = mem["peak"]
    assert peak["parameters_bytes"] == params and peak["gradients_bytes"] == params
    assert peak["optimizer_state_bytes"] == 0  # plain SGD keeps no state
    assert peak["saved_for_backward_bytes"] > 0 and peak["saved_by_module"]
