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


FIELDS = ("version", "epoch", "samples_done", "batches_done", "seed", "world_size", "plan")


def make_state(*, epoch: int, samples_done: int, batches_done: int, seed: int, world_size: int,
               plan: str, **order: int) -> dict:
    """The resume state, one flat JSON-safe dict::

        {"version": 1, "epoch": 3, "samples_done": 40960, "batches_done": 80,
         "seed": 0, "world_size": 2, "plan": "9f2c..."}

    ``samples_done`` is the prefix of the epoch's global order consumed by all ranks
    together (the strided split makes it a prefix); it alone decides where a resumed
    run continues, whatever its world size. ``batches_done`` is this rank's count, for
    logs. ``plan`` fingerprints the dataset, shuffle and drop_last. ``order`` adds what
    else fixes the order (streaming: ``canonical_nodes``, ``block_bytes``).
    """
    return {
        **{k: int(v) for k, v in order.items()},
        "version": STATE_VERSION,
        "epoch": int(epoch),
        "samples_done": int(samples_done),
        "batches_done": int(batches_done),
        "seed": int(seed),
        "world_size": int(world_size),
        "plan": plan,
    }


def check_state(state: dict, *, seed: int, plan: str) -> None:
    """Raise ValueError naming the first field of ``state`` that does not fit this loader.

    The world size may differ: the epoch then continues elastically.
    """
    missing = [k for k in FIELDS if k not in state]
    if missing:
        raise ValueError(f"resume state lacks field(s) {missing}")
    expected = {"version": STATE_VERSION, "seed": seed, "plan": plan}
    for field, value in expected.items():
        if state[field] != value:
            raise ValueError(
                f"resume state field {field!r} is {state[field]!r} but this loader has {value!r}"
                + (" (dataset, shuffle or drop_last changed)" if field == "plan" else "")
            )
    for field in ("epoch", "samples_done", "batches_done"):
        if not isinstance(state[field], int) or state[field] < 0:
            raise ValueError(f"resume state field {field!r} must be a non-negative int, got {state[field]!r}")
