"""The environment doctor's readers and checks on recorded snapshots (tests/data/doctor/README.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from diagnose.doctor import environment as env
from diagnose.doctor import process
from diagnose.machine import cgroup_cpu_limit, cpu_flags, own_cgroup_dirs

DATA = Path(__file__).resolve().parents[1] / "data" / "doctor"
TORCH_GOMP = "/work/main/.venv/lib/python3.11/site-packages/torch/lib/libgomp.so.1"
NUMPY_OPENBLAS = "/work/main/.venv/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-32a4b2a6.so"


def text(name: str) -> str:
    return (DATA / name).read_text()


def runtimes(name: str) -> env.Runtimes:
    return env.classify(env.loaded_libraries(text(name)))


def facts(check) -> dict:
    return {f.name: f.value for f in check.facts}


# ---------------------------------------------------------------- maps and runtimes


def test_loaded_libraries_unique_in_first_seen_order():
    maps = ("5577dc118000-5577dc119000 r--p 00000000 fe:00 26723   /usr/bin/python3.11\n"
            "7f00-7f01 r--p 00000000 fe:00 1   /lib/libc.so.6\n"
            "7f01-7f02 r-xp 00001000 fe:00 1   /lib/libc.so.6\n"
            "7f02-7f03 rw-p 00000000 00:00 0 \n"
            "7f03-7f04 r-xp 00000000 fe:00 2   /opt/my libs/libfoo.so (deleted)\n"
            "7f04-7f05 r--p 00000000 00:00 0   [vdso]\n"
            "7f05-7f06 r--p 00000000 fe:00 3   /lib/ld-linux-x86-64.so.2\n")
    assert env.loaded_libraries(maps) == ["/lib/libc.so.6", "/opt/my libs/libfoo.so", "/lib/ld-linux-x86-64.so.2"]


def test_recorded_torch_maps_one_gnu_openmp_and_numpys_openblas():
    r = runtimes("maps_torch.txt")
    assert r.allocator == "glibc" and r.allocator_path is None
    assert r.openmp == [env.Library("GNU", TORCH_GOMP, "torch")]
    assert r.blas == [env.Library("openblas", NUMPY_OPENBLAS, "numpy")]
    assert runtimes("maps_torch_numpy_used.txt") == r  # using numpy's BLAS maps nothing more


def test_recorded_torch_without_numpy_maps_no_blas_file():
    r = runtimes("maps_torch_no_numpy.txt")
    assert [lib.path for lib in r.openmp] == [TORCH_GOMP]
    assert r.blas == []


def test_classify_names_allocators_openmp_copies_and_blas():
    r = env.classify(["/usr/lib/libtcmalloc_minimal.so.4", "/x/site-packages/torch.libs/libgomp-a34b3233.so.1",
                      "/opt/intel/lib/libiomp5.so", "/usr/lib/llvm-17/lib/libomp.so.5",
                      "/x/lib/libmkl_rt.so.2", "/x/lib/libmkl_core.so.2",
                      "/usr/lib/libblis.so.4", "/usr/lib/libopenblas.so.0", "/usr/lib/libompitrace.so"])
    assert (r.allocator, r.allocator_path) == ("tcmalloc", "/usr/lib/libtcmalloc_minimal.so.4")
    assert [(lib.name, lib.owner) for lib in r.openmp] == [("GNU", "torch"), ("Intel", None), ("LLVM", None)]
    assert [lib.name for lib in r.blas] == ["mkl", "blis", "openblas"]  # MKL's files in one folder count once
    assert env.classify(["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"]).allocator == "jemalloc"
    assert env.classify(["/usr/lib/libmimalloc.so.2"]).allocator == "mimalloc"


# ---------------------------------------------------------------- check_openmp_runtimes


def test_openmp_plain_torch_is_ok():
    c = env.check_openmp_runtimes(runtimes("maps_torch.txt"), {})
    assert c.status == "ok" and c.suggestion is None
    assert facts(c)["OpenMP thread pools"] == 1


def test_openmp_two_copies_of_libgomp_warn():
    c = env.check_openmp_runtimes(runtimes("maps_torch_sklearn_libgomp_handmade.txt"), {})
    assert c.status == "warn"
    assert "2 copies of GNU OpenMP" in c.summary and "scikit_learn" in c.summary and TORCH_GOMP in c.summary
    assert "threadpool_limits(1, user_api='openmp')" in c.suggestion and "scikit_learn" in c.suggestion
    assert facts(c)["OpenMP thread pools"] == 2


def test_openmp_libiomp5_loaded_beside_libgomp_warns():
    c = env.check_openmp_runtimes(runtimes("maps_torch_iomp5_jemalloc_handmade.txt"), {})
    assert c.status == "warn" and "2 OpenMP runtimes" in c.summary
    assert "Intel" in c.summary and "GNU" in c.summary
    assert "LD_PRELOAD" in c.suggestion


def test_openmp_preloaded_libiomp5_serves_torchs_libgomp():
    r = runtimes("maps_torch_iomp5_jemalloc_handmade.txt")
    preload = "/opt/intel/oneapi/compiler/2024.2/lib/libiomp5.so /usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    c = env.check_openmp_runtimes(r, {"LD_PRELOAD": preload})
    assert c.status == "ok" and "also serves the 1 other copy" in c.summary
    assert facts(c)["OpenMP thread pools"] == 1 and facts(c)["LD_PRELOAD"] == preload
    assert r.allocator == "jemalloc"


def test_openmp_preloaded_libgomp_does_not_serve_intel_openmp():
    r = env.classify(["/opt/intel/lib/libiomp5.so", "/usr/lib/x86_64-linux-gnu/libgomp.so.1"])
    c = env.check_openmp_runtimes(r, {"LD_PRELOAD": "libgomp.so.1"})
    assert c.status == "warn" and facts(c)["OpenMP thread pools"] == 2


# ---------------------------------------------------------------- check_blas_threads


def test_blas_plain_torch_is_ok():
    for name in ("maps_torch.txt", "maps_torch_no_numpy.txt"):
        c = env.check_blas_threads(runtimes(name), {}, usable_cpus=2, torch_threads=2)
        assert c.status == "ok" and c.suggestion is None, name
    c = env.check_blas_threads(runtimes("maps_torch.txt"), {}, usable_cpus=2, torch_threads=2)
    assert facts(c)["OPENBLAS_NUM_THREADS (numpy)"] == "unset"
    assert "idle unless numpy/scipy linear algebra runs" in c.summary


def test_blas_busy_numpy_pool_with_unset_variable_warns():
    c = env.check_blas_threads(runtimes("maps_torch_numpy_used.txt"), {}, usable_cpus=2, torch_threads=2,
                               blas_busy=True)
    assert c.status == "warn"
    assert "numpy's openblas (2 threads)" in c.summary and "torch's 2 intra-op threads" in c.summary
    assert "OPENBLAS_NUM_THREADS=1" in c.suggestion and "worker_init_fn" in c.suggestion
    assert facts(c)["separate BLAS pool started (threaded BLAS work ran)"] is True
    assert facts(c)["thread variable to set"] == "OPENBLAS_NUM_THREADS"
    # the warning is tried from outside: the variable at 1, at launch
    from diagnose.doctor import trials

    variants, _ = trials.variants_for([c], "python t.py", every=False)
    assert [(v.name, v.check, v.env, v.change) for v in variants] == [
        ("blas_one_thread", "blas_threads", {"OPENBLAS_NUM_THREADS": "1"}, "OPENBLAS_NUM_THREADS=1 python t.py")]


def test_blas_thread_variable_set_is_ok():
    r = runtimes("maps_torch_numpy_used.txt")
    c = env.check_blas_threads(r, {"OPENBLAS_NUM_THREADS": "1"}, 2, 2, blas_busy=True)
    assert c.status == "ok" and facts(c)["OPENBLAS_NUM_THREADS (numpy)"] == "1" and "(1 thread)" in c.summary
    c = env.check_blas_threads(r, {"OMP_NUM_THREADS": "1"}, 2, 1, blas_busy=True)  # OpenBLAS falls back on it
    assert c.status == "ok" and facts(c)["OMP_NUM_THREADS (numpy)"] == "1"
    c = env.check_blas_threads(env.classify(["/opt/intel/lib/libmkl_rt.so.2"]), {"OPENBLAS_NUM_THREADS": "1"},
                               2, 2, blas_busy=True)
    assert c.status == "warn" and "MKL_NUM_THREADS=1" in c.suggestion  # the wrong library's variable


def test_blas_shipped_with_torch_is_torchs_own():
    r = env.classify(["/v/lib/python3.11/site-packages/torch.libs/libopenblasp-r0-2eadb500.3.25.so"])
    c = env.check_blas_threads(r, {}, 4, 4, blas_busy=True)
    assert c.status == "ok" and "besides torch's own" in c.summary


# ---------------------------------------------------------------- cgroup cpu.stat


def test_cgroup_cpu_stat_parses_v2_and_v1():
    after = env.cgroup_cpu_stat(text("cgroup_v2_throttled_after_handmade.stat"))
    assert after["nr_periods"] == 12100 and after["throttled_usec"] == 411234567
    assert after["core_sched.force_idle_usec"] == 0
    v1 = env.cgroup_cpu_stat(text("cgroup_v1_cpu.stat"))
    assert v1 == {"nr_periods": 0, "nr_throttled": 0, "throttled_time": 0, "nr_bursts": 0, "burst_time": 0}


def _tree(tmp_path: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(content)


def test_read_own_cpu_stat_hybrid_layout_as_on_this_machine(tmp_path):
    _tree(tmp_path, {"proc_cgroup": text("proc_self_cgroup_hybrid.txt"),
                     "fs/cpu/cpu.stat": text("cgroup_v1_cpu.stat"),
                     "fs/unified/cpu.stat": text("cgroup_v2_unified_no_cpu_controller.stat")})
    stat = env.read_own_cpu_stat(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup"))
    assert stat.path == f"{tmp_path}/fs/cpu/cpu.stat + {tmp_path}/fs/unified/cpu.stat"
    assert stat.values["nr_periods"] == 0 and stat.values["throttled_usec"] == 0
    assert stat.values["usage_usec"] == 14834669475 and "throttled_time" not in stat.values


def test_read_own_cpu_stat_v2_own_path_and_v1_nanoseconds(tmp_path):
    _tree(tmp_path, {"v2/proc_cgroup": "0::/job/step\n",
                     "v2/fs/job/step/cpu.stat": text("cgroup_v2_throttled_after_handmade.stat"),
                     "v2/fs/cpu.stat": "usage_usec 1\n"})  # the root's: not ours
    stat = env.read_own_cpu_stat(str(tmp_path / "v2/fs"), str(tmp_path / "v2/proc_cgroup"))
    assert stat.path.endswith("/job/step/cpu.stat") and stat.values["nr_throttled"] == 3150
    _tree(tmp_path, {"v1/proc_cgroup": "4:cpu,cpuacct:/docker/abc\n",
                     "v1/fs/cpu,cpuacct/docker/abc/cpu.stat": "nr_periods 10\nnr_throttled 4\nthrottled_time 2500000\n"})
    stat = env.read_own_cpu_stat(str(tmp_path / "v1/fs"), str(tmp_path / "v1/proc_cgroup"))
    assert stat.values == {"nr_periods": 10, "nr_throttled": 4, "throttled_usec": 2500}
    assert env.read_own_cpu_stat(str(tmp_path / "none"), str(tmp_path / "v1/proc_cgroup")) is None


def test_own_cgroup_dirs_is_the_one_finder_cgroup_cpu_limit_uses(tmp_path):
    _tree(tmp_path, {"proc_cgroup": "0::/job\n", "fs/job/cpu.max": "150000 100000\n"})
    dirs = own_cgroup_dirs(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup"))
    assert dirs[0] == (2, os.path.join(str(tmp_path / "fs"), "job"))
    assert (2, os.path.join(str(tmp_path / "fs"), "unified", "job")) in dirs
    assert cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup")) == 1.5


# ---------------------------------------------------------------- check_cpu_quota


def test_cpu_quota_throttled_window_warns():
    before = env.cgroup_cpu_stat(text("cgroup_v2_throttled_before_handmade.stat"))
    after = env.cgroup_cpu_stat(text("cgroup_v2_throttled_after_handmade.stat"))
    c = env.check_cpu_quota(before, after, elapsed_s=10.0, threads_busy=4.0, quota_cpus=2.0)
    assert c.status == "warn"
    f = facts(c)
    assert f["periods throttled"] == "50 / 100" and f["throttled time"] == 10.0
    assert f["share of the window throttled"] == 25.0 and c.at_stake_pct == 25.0
    assert "50 of 100 periods (50%)" in c.summary and "4.0 busy threads against a quota of 2 CPUs" in c.summary
    assert "torch.set_num_threads(2)" in c.suggestion and "raise the quota" in c.suggestion
    c = env.check_cpu_quota(before, after, 10.0, 4.0, 1.5)
    assert "torch.set_num_threads(1)" in c.suggestion


def test_cpu_quota_ok_and_skipped():
    v1 = env._v1_to_v2(env.cgroup_cpu_stat(text("cgroup_v1_cpu.stat")))  # this machine: no quota
    c = env.check_cpu_quota(v1, v1, 10.0, 2.0, None)
    assert c.status == "ok" and "No CPU quota" in c.summary
    before = env.cgroup_cpu_stat(text("cgroup_v2_throttled_before_handmade.stat"))
    after = dict(before, nr_periods=before["nr_periods"] + 100)
    c = env.check_cpu_quota(before, after, 10.0, 1.0, 2.0)
    assert c.status == "ok" and "none of the 100 periods" in c.summary
    c = env.check_cpu_quota(None, None, 10.0, None, None)
    assert c.status == "skipped" and "cpu.stat" in c.summary
    c = env.check_cpu_quota({"usage_usec": 1}, {"usage_usec": 2}, 10.0, None, None)
    assert c.status == "skipped"


# ---------------------------------------------------------------- cpu flags and low precision


def test_cpu_flags_first_flags_line():
    flags = cpu_flags(text("cpuinfo_epyc_avx2.txt"))
    assert {"avx2", "fma", "sha_ni"} <= flags and not flags & {"avx512f", "avx512_bf16", "amx_bf16"}
    assert {"avx512_bf16", "amx_bf16", "avx512_fp16"} <= cpu_flags(text("cpuinfo_sapphire_rapids_handmade.txt"))
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}


def test_low_precision_bf16_without_instructions_warns():
    flags = cpu_flags(text("cpuinfo_epyc_avx2.txt"))
    c = env.check_low_precision(flags, {"c10::BFloat16": 62.5, "float": 37.5})
    assert c.status == "warn" and c.at_stake_pct == 62.5
    assert "bfloat16 operators take 62% of operator time" in c.summary and "avx512_bf16, amx_bf16" in c.summary
    assert "fp32" in c.suggestion
    f = facts(c)
    assert f["bfloat16 share of operator time"] == 62.5 and f["bfloat16 instructions"].startswith("none of")
    c = env.check_low_precision(flags, {"Half": 10.0, "BFloat16": 5.0, "Float": 85.0})
    assert c.status == "warn" and c.at_stake_pct == 15.0 and "bfloat16 and float16" in c.suggestion


def test_low_precision_ok_with_instructions_fp32_or_below_threshold():
    spr = cpu_flags(text("cpuinfo_sapphire_rapids_handmade.txt"))
    c = env.check_low_precision(spr, {"c10::BFloat16": 80.0, "c10::Half": 10.0, "float": 10.0})
    assert c.status == "ok" and facts(c)["bfloat16 instructions"] == "avx512_bf16, amx_bf16"
    epyc = env.check_low_precision(cpu_flags(text("cpuinfo_epyc_avx2.txt")), {"float": 100.0})
    assert epyc.status == "ok"
    below = env.LOW_PRECISION_MIN_SHARE_PCT / 2
    assert env.check_low_precision(spr - {"avx512_bf16", "amx_bf16"}, {"BFloat16": below}).status == "ok"
    assert env.check_low_precision(set(), {"BFloat16": 50.0}).status == "skipped"
    assert env.check_low_precision(spr, {}).status == "skipped"


# ---------------------------------------------------------------- topology


def test_parse_cpu_list():
    assert env.parse_cpu_list("0-1,4\n") == [0, 1, 4]
    assert env.parse_cpu_list("3") == [3] and env.parse_cpu_list("") == []


def test_read_topology_two_nodes_with_smt():
    t = env.read_topology(str(DATA / "sys_2node_smt_handmade"))
    assert t.siblings[0] == [0, 4] and t.siblings[7] == [3, 7]
    assert t.nodes == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    assert t.cores == [(0, 4), (1, 5), (2, 6), (3, 7)] and t.smt and t.node_of(6) == 1


def test_read_topology_without_node_folder_is_one_node(tmp_path):
    sysfs = tmp_path / "sys"
    shutil.copytree(DATA / "sys_2node_smt_handmade" / "devices" / "system" / "cpu", sysfs / "devices/system/cpu")
    t = env.read_topology(str(sysfs))
    assert t.nodes == {0: list(range(8))}


def test_topology_smt_siblings_shared_while_cores_are_free():
    t = env.read_topology(str(DATA / "sys_2node_smt_handmade"))
    c = env.check_topology(t, {101: [0], 102: [4]}, migrations=0, samples=50)  # both on core 0
    assert c.status == "warn" and "SMT siblings of 1 core(s) while 3 whole core(s)" in c.summary
    assert "OMP_PROC_BIND=close OMP_PLACES=cores" in c.suggestion
    assert facts(c)["free cores"] == 3
    # the free cores are outside the affinity: sharing was the only choice
    assert env.check_topology(t, {101: [0], 102: [4]}, 0, 50, allowed_cpus=[0, 4]).status == "ok"


def test_topology_two_numa_nodes_warns():
    t = env.read_topology(str(DATA / "sys_2node_smt_handmade"))
    c = env.check_topology(t, {101: [0], 102: [1], 103: [2], 104: [3]}, migrations=2, samples=200)
    assert c.status == "warn" and "2 NUMA nodes (0, 1)" in c.summary and "SMT" not in c.summary
    assert "numactl --cpunodebind=0 --membind=0" in c.suggestion
    assert facts(c)["NUMA nodes the busy threads ran on"] == "0,1"


def test_topology_frequent_cpu_changes_warn():
    t = env.read_topology(str(DATA / "sys_2node_smt_handmade"))
    c = env.check_topology(t, {101: [0, 1], 102: [1, 0]}, migrations=30, samples=100)
    assert c.status == "warn" and "changed CPU in 30%" in c.summary
    assert "taskset" in c.suggestion and facts(c)["share of samples with a CPU change"] == 30.0
    ok = env.check_topology(t, {101: [0, 1], 102: [1, 0]}, migrations=10, samples=100)
    assert ok.status == "ok"
    # too few intervals to judge, or a machine where placement does not matter (one node, no SMT)
    assert env.check_topology(t, {101: [0, 1], 102: [1, 0]}, migrations=10, samples=10).status == "ok"
    flat = env.Topology({0: [0], 1: [1]}, {0: [0, 1]})
    assert env.check_topology(flat, {101: [0, 1], 102: [1, 0]}, migrations=90, samples=100).status == "ok"


def test_topology_skipped_without_readings():
    t = env.read_topology(str(DATA / "sys_2node_smt_handmade"))
    assert env.check_topology(t, {}, None, None).status == "skipped"
    assert env.check_topology(env.Topology({}, {}), {1: [0]}, None, None).status == "skipped"


# ---------------------------------------------------------------- this machine, through the real readers


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux /proc only")
def test_this_process_and_machine_through_the_real_readers():
    # as the doctor does it: the pass reads its own maps (process.libraries), the parent classifies them
    r = env.classify(process.libraries())
    assert r.allocator in ("glibc", "jemalloc", "tcmalloc", "mimalloc")
    assert all(lib.name in ("GNU", "Intel", "LLVM") for lib in r.openmp)
    import torch  # noqa: F401 - maps torch's OpenMP runtime into this process
    r = env.classify(process.libraries())
    assert any(lib.owner == "torch" for lib in r.openmp)
    assert env.check_openmp_runtimes(r, dict(os.environ)).status == "ok"
    assert env.check_blas_threads(r, {}, 2, 2).status == "ok"  # a plain torch process
    t = env.read_topology()
    assert sorted(t.siblings) and set(t.siblings) <= {c for cpus in t.nodes.values() for c in cpus}
    busy = {i: [cpu] for i, cpu in enumerate(sorted(os.sched_getaffinity(0)))}
    check = env.check_topology(t, busy, 0, 10, allowed_cpus=sorted(os.sched_getaffinity(0)))
    if len(t.nodes) == 1 and not t.smt:  # this project's machine
        assert check.status == "ok" and "one NUMA node, without SMT" in check.summary
    with open("/proc/cpuinfo") as fh:
        assert cpu_flags(fh.read())
    stat = env.read_own_cpu_stat()
    if stat is not None:
        assert all(isinstance(v, int) for v in stat.values.values())


def test_without_the_process_readings_every_check_that_reads_them_says_skipped(tmp_path):
    """A report whose uninstrumented pass wrote no process readings: the three checks on them are each
    `skipped` with the reason (blas_threads and cpu_quota were missing from the list before)."""
    from diagnose.doctor import checks
    from diagnose.report.model import Report, TargetInfo

    by_name = {c.name: c for c in checks(Report(target=TargetInfo(script="m.py")), sys_root=str(tmp_path))}
    for name in ("openmp_runtimes", "blas_threads", "cpu_quota"):
        assert by_name[name].status == "skipped" and "no process readings" in by_name[name].summary
    assert {"page_faults", "denormals", "topology", "low_precision"} <= set(by_name)
