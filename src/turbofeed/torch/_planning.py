"""How a :class:`turbofeed.DataLoader` plans its passes: this rank's share of an epoch's
order, its length, the fingerprint in the resume state, the streamed layout saved with it,
and the rank and world size read again between passes (a process group started after the
loader was built: Lightning, Accelerate).

A mixin: the loader holds the fields (``dataset``, ``draw``, ``stream_layout``,
``_streaming``, ``_ranks``, ``_auto_threads``, ``batch_size``, ``seed``, ``shuffle``,
``drop_last``, ``rank``, ``world_size``, ``num_threads``) and ``_live_passes`` (EpochBook).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..base.threads import choose_threads
from ..engine.layout import stream_layout, with_pieces
from ..plan import EpochDraw, EpochPlan, StreamLayout, bucketed_size, count_batches, make_epoch_plan, plan_fingerprint

if TYPE_CHECKING:
    from ..io import IndexedDataset
    from .buckets import LoaderBuckets
    from ..base.ranks import RankChoice


class LoaderPlanning:  # before EpochBook in the bases: it overrides its hooks
    """The planning half of a DataLoader (see the module docstring)."""

    dataset: IndexedDataset
    draw: EpochDraw | None
    stream_layout: StreamLayout | None
    _streaming: bool | None
    _ranks: RankChoice
    _auto_threads: bool
    batch_size: int
    seed: int
    shuffle: bool
    drop_last: bool
    rank: int
    world_size: int
    num_threads: int
    _ahead: int
    _fingerprint: str
    buckets: LoaderBuckets | None
    _start: int  # EpochBook's: where a resumed epoch continues, while _resume
    _resume: bool

    if TYPE_CHECKING:
        def _live_passes(self) -> Any: ...  # EpochBook's

    def _plan_fingerprint(self) -> str:
        more: dict[str, Any] = {} if self.stream_layout is None else {"streaming": True}
        if self.draw is not None:
            more["draw"] = self.draw.fingerprint()
            if self.draw.resample:  # drawn lazily since #24: per position, or streamed, per round
                more["resampled"] = "per-position" if self.stream_layout is None else "rounds"
        if self.buckets is not None:  # the cut into global batches depends on both
            more.update(self.buckets.fingerprint(), world_size=self.world_size, batch_size=self.batch_size)
        return plan_fingerprint(dataset=self.dataset.fingerprint_fields(), shuffle=self.shuffle,
                                drop_last=self.drop_last, **more)

    def _epoch_samples(self) -> int:
        """Samples in every epoch's global order."""
        if self.buckets is not None:
            return bucketed_size(self.buckets.counts, batch_size=self.batch_size, world_size=self.world_size,
                                 drop_last=self.drop_last)
        return self.dataset.num_samples if self.draw is None else self.draw.size

    def _plan(self, epoch: int, start: int = 0) -> EpochPlan:
        """This rank's plan of ``epoch`` after ``start`` samples of its global order."""
        self._sync_ranks()
        return make_epoch_plan(self.dataset.num_samples, batch_size=self.batch_size, seed=self.seed, epoch=epoch,
                               shuffle=self.shuffle, rank=self.rank, world_size=self.world_size,
                               drop_last=self.drop_last, start=start, stream=self.stream_layout, draw=self.draw,
                               buckets=None if self.buckets is None else self.buckets.groups)

    def _stream_state(self) -> dict[str, Any]:
        return {} if self.stream_layout is None else self.stream_layout.state()

    def _adopt_stream_state(self, state: dict) -> None:
        """A streamed epoch resumes with the layout that ordered it (its canonical nodes,
        block size, overlap and pieces), whatever this run's node count and cache would choose."""
        layout = self.stream_layout
        if layout is None or "canonical_nodes" not in state:
            return
        self.stream_layout = dataclasses.replace(layout, canonical_nodes=int(state["canonical_nodes"]),
                                                 block_bytes=int(state["block_bytes"]),
                                                 overlap=int(state.get("overlap", 1)))  # 1: saved before it
        # 0: saved before pieces existed, whole shards (the order it was saved in)
        self.stream_layout = with_pieces(self.stream_layout, self.dataset, int(state.get("piece_bytes", 0)))

    def _sync_ranks(self) -> None:
        """Take the rank and world size the environment says now, between passes (a
        process group started after the loader was built: Lightning, Accelerate)."""
        if self._live_passes():
            return  # running passes keep the split they were planned with
        env = self._ranks.resolve()
        if (env.rank, env.world_size) == (self.rank, self.world_size):
            return
        self.rank, self.world_size = env.rank, env.world_size
        if self._auto_threads:  # the node's ranks share its cores
            self.num_threads = choose_threads().threads
        self.stream_layout = stream_layout(self.dataset, self._streaming, nodes=env.nodes,
                                           ranks_per_node=env.local_world_size, ahead=self._ahead)
        if self.buckets is not None:  # the bucketed cut into global batches depends on the world size
            self._fingerprint = self._plan_fingerprint()
        if self._epoch_batches() == 0:
            raise ValueError(f"batch_size={self.batch_size} with drop_last=True leaves no batch: rank "
                             f"{self.rank} of {self.world_size} has {self._per_rank()} samples")

    def _per_rank(self, start: int = 0) -> int:
        """Samples of this rank after ``start`` of the epoch's global order (all of them
        by default); ``rank_order``'s and the streamed and resampled orders' count alike."""
        self._sync_ranks()
        total = self._epoch_samples()
        n, w = total - min(start, total), self.world_size
        return n // w if self.drop_last else -(-n // w)

    def _epoch_batches(self) -> int:
        """Batches of a whole epoch on this rank (the same on every rank)."""
        return count_batches(self._per_rank(), self.batch_size, self.drop_last)

    def __len__(self) -> int:
        """Batches the next ``iter(loader)`` yields on this rank (the same on every rank):
        a whole epoch's, or after :meth:`load_state_dict` (until that pass starts), the
        rest of the resumed epoch, as tqdm and Lightning count the steps."""
        start = self._start if self._resume else 0
        return count_batches(self._per_rank(start), self.batch_size, self.drop_last)
