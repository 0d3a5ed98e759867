"""Usable CPUs from cgroup quotas (v1 and v2) on fake cgroup trees."""

from __future__ import annotations

from diagnose import machine


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/job\n")
    write(tmp_path / "fs" / "job" / "cpu.max", "150000 100000\n")
    assert machine.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup")) == 1.5


def test_cgroup_v2_unlimited(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/\n")
    write(tmp_path / "fs" / "cpu.max", "max 100000\n")
    assert machine.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup")) is None


def test_cgroup_v1_quota(tmp_path):
    write(tmp_path / "proc_cgroup", "4:cpu,cpuacct:/docker/abc\n")
    base = tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc"
    write(base / "cpu.cfs_quota_us", "300000\n")
    write(base / "cpu.cfs_period_us", "100000\n")
    assert machine.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup")) == 3.0


def test_cgroup_v1_no_quota(tmp_path):
    write(tmp_path / "proc_cgroup", "4:cpu,cpuacct:/\n")
    write(tmp_path / "fs" / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "fs" / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert machine.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc_cgroup")) is None


def test_this_machine():
    m = machine.describe(env={"OMP_NUM_THREADS": "2", "HOME": "/root"})
    assert 1 <= m.usable_cpus <= m.logical_cpus
    assert m.threading_env == {"OMP_NUM_THREADS": "2"}
    assert m.cpu_model
