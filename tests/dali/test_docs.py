"""docs/dali.md's examples run as written (on the CPU: device_id=None, device="cpu", no
.gpu(); the seed's GPUDirectReader call is in test_objects.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from turbofeed.dali import DALI_FIX

pytest.importorskip("nvidia.dali", reason=f"NVIDIA DALI is not installed: {DALI_FIX}")
pytest.importorskip("torch", reason="DALIGenericIterator gives torch tensors: pip install 'turbofeed[torch]'")

DOC = Path(__file__).resolve().parents[2] / "docs" / "dali.md"


def test_reader_example_runs_on_the_cpu(shards):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    code = next(b for b in blocks if "DALIGenericIterator" in b)
    cpu = (code.replace('"data/shard-{000000..000146}.tar"', repr(shards)).replace("device_id=0", "device_id=None")
           .replace('device="mixed"', 'device="cpu"').replace("labels.gpu()", "labels")
           .replace("range(90)", "range(2)").replace("batch_size=64", "batch_size=16"))
    assert cpu.count(repr(shards)) == 1 and "device_id=None" in cpu and 'device="cpu"' in cpu
    seen: list[int] = []
    cpu = cpu.replace('batch["images"], batch["labels"]', 'seen.append(batch["images"].shape[0])')
    exec(compile(cpu, str(DOC), "exec"), {"seen": seen})
    assert sum(seen) == 2 * 120
