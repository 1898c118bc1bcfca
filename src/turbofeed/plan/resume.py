"""Resume state: a small JSON-safe dict computed when asked, never snapshotted per step."""

from __future__ import annotations

import hashlib
import json
from typing import Any

STATE_VERSION = 1


def plan_fingerprint(**fields: Any) -> str:
    """Short stable hash of everything that decides the order (sizes, seed, options)."""
    blob = json.dumps(fields, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def make_state(*, epoch: int, batches_done: int, seed: int, world_size: int, plan: str) -> dict:
    """The resume state: ``{"version", "epoch", "batches_done", "seed", "world_size", "plan"}``."""
    return {
        "version": STATE_VERSION,
        "epoch": int(epoch),
        "batches_done": int(batches_done),
        "seed": int(seed),
        "world_size": int(world_size),
        "plan": plan,
    }


def check_state(state: dict, *, seed: int, world_size: int, plan: str) -> None:
    """Raise ValueError naming the first field of ``state`` that does not fit this loader."""
    missing = [k for k in ("version", "epoch", "batches_done", "seed", "world_size", "plan")
               if k not in state]
    if missing:
        raise ValueError(f"resume state lacks field(s) {missing}")
    expected = {"version": STATE_VERSION, "seed": seed, "world_size": world_size, "plan": plan}
    for field, value in expected.items():
        if state[field] != value:
            raise ValueError(
                f"resume state field {field!r} is {state[field]!r} but this loader has {value!r}"
                + (" (dataset, batch size, shuffle or drop_last changed)" if field == "plan" else "")
            )
    if state["epoch"] < 0 or state["batches_done"] < 0:
        raise ValueError(f"resume state has negative epoch or batches_done: {state}")
