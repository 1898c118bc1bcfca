"""Resume state: a small JSON-safe dict computed when asked, never snapshotted per step."""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from typing import Any

#: 2: crop windows and flips come from a counter-based generator keyed by (seed, epoch,
#: sample id) (turbofeed.transforms.draws); version 1 drew them from random.Random.
STATE_VERSION = 2


def plan_fingerprint(**fields: Any) -> str:
    """Short stable hash of everything that decides the order (sizes, seed, options)."""
    blob = json.dumps(fields, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


FIELDS = ("version", "epoch", "samples_done", "batches_done", "seed", "world_size", "plan")


def make_state(*, epoch: int, samples_done: int, batches_done: int, seed: int, world_size: int,
               plan: str, data: DataPrint | None = None, **order: int) -> dict:
    """The resume state, one flat JSON-safe dict::

        {"version": 2, "epoch": 3, "samples_done": 40960, "batches_done": 80,
         "seed": 0, "world_size": 2, "plan": "9f2c...", "data": "51be...",
         "data_samples": 1281167, "data_shards": 147, "data_parts": "0c1f9a2e..."}

    ``samples_done`` is the prefix of the epoch's global order consumed by all ranks
    together (the strided split makes it a prefix); it alone decides where a resumed
    run continues, whatever its world size. ``batches_done`` is this rank's count, for
    logs. ``plan`` fingerprints the dataset, shuffle and drop_last. ``order`` adds what
    else fixes the order (streaming: ``canonical_nodes``, ``block_bytes``). ``data``
    (:class:`DataPrint`) binds the state to what the data holds.
    """
    return {
        **{k: int(v) for k, v in order.items()},
        **({} if data is None else data.state()),
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

    The world size may differ: the epoch then continues elastically. A version-1 state
    (before crops came from :mod:`turbofeed.transforms.draws`) is refused, saying why.
    """
    missing = [k for k in FIELDS if k not in state]
    if missing:
        raise ValueError(f"resume state lacks field(s) {missing}")
    if state["version"] == 1:
        raise ValueError(f"resume state field 'version' is 1 (saved by an older turbofeed): crops and flips now "
                         f"come from a counter-based generator, so it cannot resume with the same pixels; start "
                         f"epoch {state['epoch']!r} again (set_epoch({state['epoch']!r}), no load_state_dict) or "
                         f"resume with the older turbofeed")
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


@dataclass(frozen=True)
class DataPrint:
    """What a dataset holds, as a resume state carries it: a digest over every shard's name
    (not its path), sample keys, member names and sizes and labels, so that a state resumes
    only on the data it was saved on, wherever that data was copied (machine, directory,
    bucket). Computed once per loader (:func:`turbofeed.io.fingerprint.data_print`).

    Attributes:
        digest: 16 hex digits over the whole dataset.
        samples: samples in the dataset.
        names: the shards' names, in dataset order (for messages; not in the state).
        parts: 8 hex digits per part, the shards cut into at most :data:`PARTS`
            contiguous parts (one per shard up to that many), so a mismatch can be
            pinned to a shard (or a range of them) with a state of a few hundred bytes.
    """

    digest: str
    samples: int
    names: tuple[str, ...]
    parts: tuple[str, ...]

    PARTS = 64

    @staticmethod
    def part_bounds(shards: int) -> list[int]:
        """Where each part starts (and the last ends) among ``shards`` shards."""
        parts = min(shards, DataPrint.PARTS)
        return [p * shards // parts for p in range(parts + 1)] if parts else [0]

    def state(self) -> dict[str, Any]:
        """The fields a resume state keeps (JSON-safe scalars)."""
        return {"data": self.digest, "data_samples": self.samples, "data_shards": len(self.names),
                "data_parts": "".join(self.parts)}

    def difference(self, state: dict) -> str | None:
        """None when ``state`` was saved on this data, else one line saying what differs."""
        if state["data"] == self.digest:
            return None
        saved = (f"the state was saved on data with fingerprint {state['data']} ({state.get('data_samples', '?')} "
                 f"samples in {state.get('data_shards', '?')} shards); this loader's data is {self.digest} "
                 f"({self.samples} samples in {len(self.names)} shards)")
        old_parts = str(state.get("data_parts", ""))
        if state.get("data_shards") != len(self.names) or len(old_parts) != 8 * len(self.parts):
            return saved
        bounds = self.part_bounds(len(self.names))
        differ = [p for p, mine in enumerate(self.parts) if old_parts[8 * p:8 * p + 8] != mine]
        where = []
        for p in differ[:3]:
            first, last = self.names[bounds[p]], self.names[bounds[p + 1] - 1]
            where.append(first if bounds[p + 1] - bounds[p] == 1 else f"one of {first} .. {last}")
        more = f" and {len(differ) - 3} more parts" if len(differ) > 3 else ""
        return f"{saved}: {', '.join(where) or 'the shards'}{more} differ(s) (sample keys, member names or sizes, labels)"


def check_data(state: dict, data: DataPrint) -> None:
    """Raise ValueError when ``state`` was saved on other data than ``data`` describes
    (naming the shard that differs); warn when it carries no data fingerprint (a state
    saved before turbofeed recorded one: it resumes unchecked)."""
    if "data" not in state:
        warnings.warn("turbofeed: this resume state has no data fingerprint (saved by an earlier turbofeed); "
                      "it resumes without checking that the data is the one it was saved on", UserWarning,
                      stacklevel=3)
        return
    why = data.difference(state)
    if why is not None:
        raise ValueError(f"resume state is from other data: {why}")
