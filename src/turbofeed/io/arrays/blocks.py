"""A bounded, shared cache of decoded blocks (chunk rows, Parquet row groups) of array sources.

A shuffled epoch reads samples in random order; when the storage unit holds many samples
(a compressed HDF5/Zarr chunk of 64 images, a Parquet row group of 100 JPEGs), reading
one sample costs reading and decompressing the whole unit. Keeping decoded units in a
cache turns the other samples of the unit into memory reads, and counting the loads
shows exactly how often a unit was read again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ...base.counters import Counters


def _default_budget() -> int:
    mb = os.environ.get("TURBOFEED_BLOCK_CACHE_MB")
    return int(float(mb) * 2**20) if mb else 1024 * 2**20


#: What one source counts of its reads (:func:`io_counts`): samples asked for, blocks
#: loaded from storage, cache hits, and the decoded bytes loaded. ``block_loads /
#: blocks`` above 1 means units were read more than once in an epoch (the cache was
#: smaller than the data).
IO_COUNTS = ("samples", "block_loads", "block_hits", "bytes_loaded")


def io_counts() -> Counters:
    """Fresh counts of one source's reads (:data:`IO_COUNTS`)."""
    return Counters(*IO_COUNTS)


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class BlockCache:
    """LRU of decoded blocks keyed by ``(owner, block)``, shared by every source.

    Invariants: cached bytes <= ``budget`` (a block bigger than the budget is used by
    the readers waiting for it and not kept); each block is loaded by one thread at a
    time, other threads asking for it wait for that load instead of repeating it.
    The budget is ``$TURBOFEED_BLOCK_CACHE_MB`` (default 1024 MiB) for the process.
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = _default_budget() if budget is None else budget
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._loading: dict[tuple, _Pending] = {}
        self.cached_bytes = 0

    def get(self, key: tuple, load: Callable[[], tuple[Any, int]], counts: Counters) -> Any:
        """The block ``key``, from the cache or from ``load() -> (value, nbytes)``.

        Raises:
            whatever ``load`` raised (waiting threads get an ``OSError`` naming it).
        """
        with self._lock:
            hit = self._blocks.get(key)
            if hit is not None:
                self._blocks.move_to_end(key)
                counts.add("block_hits")
                return hit[0]
            pending = self._loading.get(key)
            owner = pending is None
            if pending is None:
                pending = self._loading[key] = _Pending()
        if not owner:
            pending.done.wait()  # the owner always sets it (finally below)
            if pending.error is not None:
                raise OSError(f"loading block {key[1]} failed: {pending.error}") from pending.error
            counts.add("block_hits")
            return pending.value
        try:
            value, nbytes = load()
            pending.value = value
            counts.add_many(block_loads=1, bytes_loaded=nbytes)
            with self._lock:
                if nbytes <= self.budget:
                    self._blocks[key] = (value, nbytes)
                    self.cached_bytes += nbytes
                    while self.cached_bytes > self.budget:
                        _, (_, dropped) = self._blocks.popitem(last=False)
                        self.cached_bytes -= dropped
            return value
        except BaseException as exc:
            pending.error = exc
            raise
        finally:
            with self._lock:
                self._loading.pop(key, None)
            pending.done.set()

    def drop(self, owner: object) -> None:
        """Forget every block of ``owner`` (a closed source)."""
        with self._lock:
            for key in [k for k in self._blocks if k[0] == owner]:
                self.cached_bytes -= self._blocks.pop(key)[1]


BLOCKS = BlockCache()
