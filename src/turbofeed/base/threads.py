"""How many decode threads a loader starts when ``num_workers=None``: the cores this process
may use (its CPU affinity, and the cgroup v2/v1 CPU quota of a container or a SLURM/
Kubernetes job), shared by the ranks of this node.

``os.cpu_count()`` counts the machine's CPUs, not the ones a container or ``taskset``
lets this process run on: 8 ranks of a 96-core node each starting 96 threads would run
768 threads on 96 cores (or on the 12 a quota grants), all slowed by switching.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .ranks import detect

#: Where the cgroup file systems are mounted, and this process's cgroup lines.
CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"


@dataclass(frozen=True)
class ThreadChoice:
    """The threads ``num_workers=None`` starts, and why (``turbofeed doctor`` prints it)."""

    threads: int
    cpus: float  # cores this process may use: affinity, bounded by the quota
    ranks_per_node: int
    why: str


def affinity_cpus() -> int:
    """CPUs this process may run on (``taskset``, cpusets); all of them where unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows: no affinity API
        return os.cpu_count() or 1


def _up(path: str) -> list[str]:
    """``/a/b`` -> ``["a/b", "a", ""]``: a cgroup and its ancestors (each may bound it)."""
    parts = [p for p in path.strip().split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_limit(root: str, cgroup: str) -> float | None:
    """The tightest ``cpu.max`` (``"QUOTA PERIOD"`` or ``"max PERIOD"``) on the path."""
    best = None
    for d in _up(cgroup):
        text = _read(os.path.join(root, d, "cpu.max"))
        fields = text.split() if text else []
        if len(fields) == 2 and fields[0] != "max":
            try:
                cores = int(fields[0]) / int(fields[1])
            except (ValueError, ZeroDivisionError):
                continue
            best = cores if best is None else min(best, cores)
    return best


def _v1_limit(root: str, controllers: str, cgroup: str) -> float | None:
    """The tightest ``cpu.cfs_quota_us / cpu.cfs_period_us`` (-1: none) on the path."""
    mounts = [m for m in (controllers, "cpu,cpuacct", "cpuacct,cpu", "cpu") if os.path.isdir(os.path.join(root, m))]
    if not mounts:
        return None
    best = None
    for d in _up(cgroup):
        quota = _read(os.path.join(root, mounts[0], d, "cpu.cfs_quota_us"))
        period = _read(os.path.join(root, mounts[0], d, "cpu.cfs_period_us"))
        try:
            q, p = int(quota or "-1"), int(period or "0")
        except ValueError:
            continue
        if q > 0 and p > 0:
            best = q / p if best is None else min(best, q / p)
    return best


def cgroup_cpus(root: str = CGROUP_ROOT, self_cgroup: str = SELF_CGROUP) -> float | None:
    """Cores the cgroup CPU quota grants this process (v2 ``cpu.max`` or v1 CFS quota, the
    tightest of its cgroup and their ancestors); None when there is none or no cgroups.
    A container sees its own cgroup as the root: the walk up ends there."""
    text = _read(self_cgroup)
    if not text:
        return None
    limits = []
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, cgroup = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            limits.append(_v2_limit(root, cgroup))
        elif "cpu" in controllers.split(","):
            limits.append(_v1_limit(root, controllers, cgroup))
    found = [x for x in limits if x is not None]
    return min(found) if found else None


def choose_threads(ranks_per_node: int | None = None, *, cgroup_root: str = CGROUP_ROOT,
                   self_cgroup: str = SELF_CGROUP) -> ThreadChoice:
    """Threads for ``num_workers=None``: usable cores // ranks on this node, at least 1.

    Args:
        ranks_per_node: the ranks sharing this node's cores; default: the launcher's
            ``LOCAL_WORLD_SIZE`` (SLURM, Horovod, MPI likewise), else the world size of
            an initialised process group or launcher (one node), else 1.
        cgroup_root, self_cgroup: where the cgroup files are (tests point them elsewhere).
    """
    if ranks_per_node is None:
        ranks_per_node = detect().local_world_size
    ranks_per_node = max(1, ranks_per_node)
    affinity = affinity_cpus()
    quota = cgroup_cpus(cgroup_root, self_cgroup)
    cpus = float(affinity) if quota is None else min(float(affinity), quota)
    threads = max(1, math.floor(cpus / ranks_per_node))
    why = (f"{threads} thread(s): {cpus:g} usable core(s) (CPU affinity {affinity}, cgroup quota "
           f"{'none' if quota is None else f'{quota:g}'}) / {ranks_per_node} rank(s) on this node; "
           "num_workers=N overrides")
    return ThreadChoice(threads, cpus, ranks_per_node, why)
