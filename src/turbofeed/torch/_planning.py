"""How a :class:`turbofeed.DataLoader` plans its passes: this rank's share of an epoch's
order, its length, the fingerprint in the resume state, the streamed layout saved with it,
and the rank and world size read again between passes (a process group started after the
loader was built: Lightning, Accelerate).

An object the loader holds (``loader.planner``): it owns how ranks are chosen again
(``ranks``, ``auto_threads``), the streaming request and read-ahead, and the plan's
fingerprint; it reads and updates the loader's public plan fields (``dataset``, ``draw``,
``stream_layout``, ``buckets``, ``batch_size``, ``seed``, ``shuffle``, ``drop_last``,
``rank``, ``world_size``, ``num_threads``) and asks the loader's book
(:class:`~turbofeed.torch._epochs.EpochBook`) which passes run.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from ..base.threads import choose_threads
from ..engine.layout import stream_layout, with_pieces
from ..plan import EpochPlan, bucketed_size, count_batches, make_epoch_plan, plan_fingerprint

if TYPE_CHECKING:
    from ..base.ranks import RankChoice
    from .loader import DataLoader


class LoaderPlanner:
    """The planning half of a DataLoader (see the module docstring).

    Args:
        loader: the loader whose plans these are (held weakly: the loader holds this).
        ranks: how the rank and world size are read again between passes.
        auto_threads: ``num_workers=None``: threads chosen again when the ranks change.
        streaming: the ``streaming`` the data asked for (None: chosen by size).
        ahead: how far the fetch stage reads ahead, in samples.
    """

    def __init__(self, loader: DataLoader, *, ranks: RankChoice, auto_threads: bool, streaming: bool | None,
                 ahead: int) -> None:
        self._loader = weakref.proxy(loader)
        self.ranks = ranks
        self.auto_threads = auto_threads
        self.streaming = streaming
        self.ahead = ahead
        self.fingerprint = ""  # make_fingerprint(), once the loader's plan fields are set

    def make_fingerprint(self) -> str:
        """The plan's fingerprint in the resume state (what a state must match to load)."""
        loader = self._loader
        more: dict[str, Any] = {} if loader.stream_layout is None else {"streaming": True}
        if loader.draw is not None:
            more["draw"] = loader.draw.fingerprint()
            if loader.draw.resample:  # drawn lazily since #24: per position, or streamed, per round
                more["resampled"] = "per-position" if loader.stream_layout is None else "rounds"
        if loader.buckets is not None:  # the cut into global batches depends on both
            more.update(loader.buckets.fingerprint(), world_size=loader.world_size, batch_size=loader.batch_size)
        return plan_fingerprint(dataset=loader.dataset.fingerprint_fields(), shuffle=loader.shuffle,
                                drop_last=loader.drop_last, **more)

    def epoch_samples(self) -> int:
        """Samples in every epoch's global order."""
        loader = self._loader
        if loader.buckets is not None:
            return bucketed_size(loader.buckets.counts, batch_size=loader.batch_size, world_size=loader.world_size,
                                 drop_last=loader.drop_last)
        return loader.dataset.num_samples if loader.draw is None else loader.draw.size

    def plan(self, epoch: int, start: int = 0) -> EpochPlan:
        """This rank's plan of ``epoch`` after ``start`` samples of its global order."""
        self.sync_ranks()
        loader = self._loader
        return make_epoch_plan(loader.dataset.num_samples, batch_size=loader.batch_size, seed=loader.seed,
                               epoch=epoch, shuffle=loader.shuffle, rank=loader.rank, world_size=loader.world_size,
                               drop_last=loader.drop_last, start=start, stream=loader.stream_layout, draw=loader.draw,
                               buckets=None if loader.buckets is None else loader.buckets.groups)

    def stream_state(self) -> dict[str, Any]:
        """The order's extra fields in the resume state (streaming mode's layout)."""
        layout = self._loader.stream_layout
        return {} if layout is None else layout.state()

    def adopt_stream_state(self, state: dict) -> None:
        """A streamed epoch resumes with the layout that ordered it (its canonical nodes,
        block size, overlap and pieces), whatever this run's node count and cache would choose."""
        loader = self._loader
        layout = loader.stream_layout
        if layout is None or "canonical_nodes" not in state:
            return
        layout = dataclasses.replace(layout, canonical_nodes=int(state["canonical_nodes"]),
                                     block_bytes=int(state["block_bytes"]),
                                     overlap=int(state.get("overlap", 1)))  # 1: saved before it
        # 0: saved before pieces existed, whole shards (the order it was saved in)
        loader.stream_layout = with_pieces(layout, loader.dataset, int(state.get("piece_bytes", 0)))

    def sync_ranks(self) -> None:
        """Take the rank and world size the environment says now, between passes (a
        process group started after the loader was built: Lightning, Accelerate)."""
        loader = self._loader
        if loader.book.live_passes():
            return  # running passes keep the split they were planned with
        env = self.ranks.resolve()
        if (env.rank, env.world_size) == (loader.rank, loader.world_size):
            return
        loader.rank, loader.world_size = env.rank, env.world_size
        if self.auto_threads:  # the node's ranks share its cores
            loader.num_threads = choose_threads().threads
        loader.stream_layout = stream_layout(loader.dataset, self.streaming, nodes=env.nodes,
                                             ranks_per_node=env.local_world_size, ahead=self.ahead)
        if loader.buckets is not None:  # the bucketed cut into global batches depends on the world size
            self.fingerprint = self.make_fingerprint()
        if self.epoch_batches() == 0:
            raise ValueError(f"batch_size={loader.batch_size} with drop_last=True leaves no batch: rank "
                             f"{loader.rank} of {loader.world_size} has {self.per_rank()} samples")

    def per_rank(self, start: int = 0) -> int:
        """Samples of this rank after ``start`` of the epoch's global order (all of them
        by default); ``rank_order``'s and the streamed and resampled orders' count alike."""
        self.sync_ranks()
        total = self.epoch_samples()
        n, w = total - min(start, total), self._loader.world_size
        return n // w if self._loader.drop_last else -(-n // w)

    def epoch_batches(self, start: int = 0) -> int:
        """Batches of this rank (the same on every rank) after ``start`` samples of the
        epoch's global order (a whole epoch's by default)."""
        return count_batches(self.per_rank(start), self._loader.batch_size, self._loader.drop_last)
