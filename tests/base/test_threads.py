"""``num_workers=None``: threads from the cores this process may use (CPU affinity, cgroup
quota) shared by the ranks of its node. The affinity is set for real on child processes
(``os.sched_setaffinity``); the quota comes from cgroup files written by the test, because
setting a real CPU quota needs root and a delegated cgroup, which tests do not have: the
cgroup paths are arguments of :func:`choose_threads` for that reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from turbofeed.base.threads import cgroup_cpus, choose_threads

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API here")
LAUNCHER_VARS = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                 "MPI_LOCALNRANKS", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


def child(code: str, cpus: set[int] | None = None, **env: str) -> dict:
    """Run ``code`` (which prints one JSON line) in a child limited to ``cpus``."""
    clean = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    pin = f"import os; os.sched_setaffinity(0, {sorted(cpus)!r})\n" if cpus is not None else ""
    done = subprocess.run([sys.executable, "-c", pin + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={**clean, "OMP_NUM_THREADS": "1", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


LOADER = """
    import json, os, turbofeed
    auto = turbofeed.DataLoader({shards!r}, batch_size=8)
    fixed = turbofeed.DataLoader({shards!r}, batch_size=8, num_workers=3)
    pipe = turbofeed.Pipeline({shards!r})
    images = sum(len(labels) for _, labels in auto)
    print(json.dumps({{"auto": auto.num_threads, "fixed": fixed.num_threads, "pipe": pipe.num_workers,
                      "images": images, "cpus": len(os.sched_getaffinity(0))}}))
"""


@needs_affinity
def test_one_cpu_of_affinity_gives_one_thread_and_an_explicit_number_wins(shards):
    first = min(os.sched_getaffinity(0))
    got = child(LOADER.format(shards=shards), cpus={first})
    assert got == {"auto": 1, "fixed": 3, "pipe": 1, "images": 120, "cpus": 1}


@needs_affinity
def test_the_ranks_of_a_node_share_its_cores(shards):
    mine = os.sched_getaffinity(0)
    quota = cgroup_cpus()
    usable = len(mine) if quota is None else min(len(mine), int(quota))
    got = child(LOADER.format(shards=shards))
    assert got["auto"] == max(1, usable) and got["fixed"] == 3
    ranks = str(2 * len(mine))  # as torchrun --nproc_per_node sets them
    shared = child(LOADER.format(shards=shards), RANK="0", WORLD_SIZE=ranks, LOCAL_WORLD_SIZE=ranks)
    assert shared["auto"] == 1  # more ranks than cores: still one thread each


@needs_affinity
def test_doctor_prints_the_choice_and_why():
    first = min(os.sched_getaffinity(0))
    report = child("""
        import json, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "turbofeed", "doctor", "--json"], capture_output=True,
                              text=True, timeout=100)
        print(json.dumps(json.loads(done.stdout)["threads"]))
    """, cpus={first})  # the doctor, a grandchild, inherits the one-CPU affinity
    assert report["on"] is True and report["why"].startswith("1 thread(s)") and "CPU affinity 1" in report["why"]


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_tightest_on_the_path(tmp_path):
    write(tmp_path / "self", "0::/job/step\n")
    write(tmp_path / "root" / "job" / "step" / "cpu.max", "max 100000\n")  # no bound here
    write(tmp_path / "root" / "job" / "cpu.max", "150000 100000\n")        # 1.5 cores for the job
    assert cgroup_cpus(str(tmp_path / "root"), str(tmp_path / "self")) == 1.5
    write(tmp_path / "root" / "job" / "step" / "cpu.max", "50000 100000\n")
    assert cgroup_cpus(str(tmp_path / "root"), str(tmp_path / "self")) == 0.5
    choice = choose_threads(1, cgroup_root=str(tmp_path / "root"), self_cgroup=str(tmp_path / "self"))
    assert choice.threads == 1 and "cgroup quota 0.5" in choice.why  # at least one thread


def test_cgroup_v1_cfs_quota_and_no_quota(tmp_path):
    write(tmp_path / "self", "4:memory:/x\n3:cpu,cpuacct:/kubepods/pod1\n")
    base = tmp_path / "root" / "cpu,cpuacct"
    write(base / "kubepods" / "pod1" / "cpu.cfs_quota_us", "400000\n")
    write(base / "kubepods" / "pod1" / "cpu.cfs_period_us", "100000\n")
    write(base / "cpu.cfs_quota_us", "-1\n")
    write(base / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpus(str(tmp_path / "root"), str(tmp_path / "self")) == 4.0
    write(base / "kubepods" / "pod1" / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpus(str(tmp_path / "root"), str(tmp_path / "self")) is None
    assert cgroup_cpus(str(tmp_path / "root"), str(tmp_path / "missing")) is None


def test_quota_and_ranks_divide_the_affinity(tmp_path):
    write(tmp_path / "self", "0::/\n")
    write(tmp_path / "root" / "cpu.max", f"{64 * 100000} 100000\n")  # a quota above the affinity: no bound
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    kw = dict(cgroup_root=str(tmp_path / "root"), self_cgroup=str(tmp_path / "self"))
    assert choose_threads(1, **kw).threads == mine
    assert choose_threads(mine * 4, **kw).threads == 1
