"""The registry of sampling plans: which order an epoch takes, chosen from the options.

:func:`make_epoch_plan` asks :func:`choose` with the options it was
given (a :class:`PlanRequest`); the first row of :data:`PLANS` whose ``selects`` holds
builds the :class:`~turbofeed.plan.order.EpochPlan`:

================  ==========================================  ==============================
name              selected by                                 order
================  ==========================================  ==============================
buckets           ``buckets`` (alone)                          :mod:`~.buckets`, int64 array
resampled         ``draw.resample``, no ``stream``             :class:`~.resampled.ResampledRankOrder`
resampled-rounds  ``draw.resample`` and ``stream``             :class:`~.stream_rounds.RoundsRankOrder`
streamed          ``stream`` (``draw``: weighted visits)       :mod:`~.streaming`, with ``blocks``
order             anything else (``draw``: weighted visits)    :func:`~.order.rank_order`
================  ==========================================  ==============================

Adding a plan: its module (a pure function, STYLE.md 1) and one :class:`Plan` here,
before the rows it must take precedence over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .buckets import bucket_order
from .mixing import EpochDraw
from .order import EpochPlan, count_batches, rank_order
from .resampled import ResampledRankOrder
from .stream_rounds import rounds_rank_order
from .streaming import StreamLayout, stream_blocks, stream_rank_order


@dataclass(frozen=True)
class PlanRequest:
    """The inputs of one rank's epoch plan: :func:`make_epoch_plan`'s
    arguments, as it was called."""

    num_samples: int
    batch_size: int
    seed: int
    epoch: int
    shuffle: bool
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    start: int = 0
    stream: StreamLayout | None = None
    draw: EpochDraw | None = None
    buckets: np.ndarray | None = None

    @property
    def resample(self) -> bool:
        return self.draw is not None and self.draw.resample


@dataclass(frozen=True)
class Plan:
    """One sampling plan.

    Attributes:
        name: how stats, tests and the docs call it.
        selected_by: the options that select it, in words.
        selects: ``selects(request)``: this plan makes the epoch (rows are asked in order).
        build: ``build(request) -> EpochPlan``.
    """

    name: str
    selected_by: str
    selects: Callable[[PlanRequest], bool]
    build: Callable[[PlanRequest], EpochPlan]


def _buckets(r: PlanRequest) -> EpochPlan:
    assert r.buckets is not None
    if r.stream is not None or r.draw is not None:
        raise ValueError("aspect-ratio buckets do not combine with streaming, weights or resampling")
    count_batches(len(r.buckets), r.batch_size, r.drop_last)  # validates batch_size before it cuts the buckets
    order = bucket_order(r.buckets, batch_size=r.batch_size, world_size=r.world_size, seed=r.seed, epoch=r.epoch,
                         shuffle=r.shuffle, drop_last=r.drop_last)
    order = rank_order(len(order), seed=r.seed, epoch=r.epoch, shuffle=False, rank=r.rank, world_size=r.world_size,
                       drop_last=r.drop_last, start=r.start, population=order)
    return EpochPlan(order=order, batch_size=r.batch_size, drop_last=r.drop_last, groups=r.buckets)


def _lazy(r: PlanRequest) -> EpochPlan:
    """A resampled epoch, drawn lazily: per position, or (streamed) round by round."""
    assert r.draw is not None
    lazy: ResampledRankOrder
    if r.stream is None:
        lazy = ResampledRankOrder(r.draw.resampled(seed=r.seed, epoch=r.epoch), rank=r.rank,
                                  world_size=r.world_size, drop_last=r.drop_last, start=r.start)
    else:
        lazy = rounds_rank_order(r.draw, r.stream, seed=r.seed, epoch=r.epoch, shuffle=r.shuffle, rank=r.rank,
                                 world_size=r.world_size, drop_last=r.drop_last, start=r.start)
    count_batches(len(lazy), r.batch_size, r.drop_last)  # validates batch_size
    return EpochPlan(order=lazy, batch_size=r.batch_size, drop_last=r.drop_last)


def _streamed(r: PlanRequest) -> EpochPlan:
    stream = r.stream
    assert stream is not None
    visits = None if r.draw is None else r.draw.visits(seed=r.seed, epoch=r.epoch)
    full, block = stream_blocks(stream.starts, stream.shard_bytes, seed=r.seed, epoch=r.epoch, shuffle=r.shuffle,
                                canonical_nodes=stream.canonical_nodes, block_bytes=stream.block_bytes,
                                visits=visits, overlap=stream.overlap, pieces=stream.pieces)
    order, blocks = (stream_rank_order(a, rank=r.rank, world_size=r.world_size, ranks_per_node=stream.ranks_per_node,
                                       canonical_nodes=stream.canonical_nodes, drop_last=r.drop_last, start=r.start)
                     for a in (full, block))  # the same positions of both
    count_batches(len(order), r.batch_size, r.drop_last)  # validates batch_size
    return EpochPlan(order=order, batch_size=r.batch_size, drop_last=r.drop_last, blocks=blocks)


def _order(r: PlanRequest) -> EpochPlan:
    visits = None if r.draw is None else r.draw.visits(seed=r.seed, epoch=r.epoch)
    order = rank_order(r.num_samples if visits is None else len(visits), seed=r.seed, epoch=r.epoch,
                       shuffle=r.shuffle, rank=r.rank, world_size=r.world_size, drop_last=r.drop_last,
                       start=r.start, population=None if visits is None else visits.ids)
    count_batches(len(order), r.batch_size, r.drop_last)  # validates batch_size
    return EpochPlan(order=order, batch_size=r.batch_size, drop_last=r.drop_last)


#: The sampling plans, in the order they are asked (the first that selects wins).
PLANS: tuple[Plan, ...] = (
    Plan("buckets", "buckets (not with stream or draw)", lambda r: r.buckets is not None, _buckets),
    Plan("resampled", "draw.resample without stream", lambda r: r.resample and r.stream is None, _lazy),
    Plan("resampled-rounds", "draw.resample with stream", lambda r: r.resample and r.stream is not None, _lazy),
    Plan("streamed", "stream (draw: weighted visits)", lambda r: r.stream is not None, _streamed),
    Plan("order", "anything else (draw: weighted visits)", lambda r: True, _order),
)


def choose(request: PlanRequest) -> Plan:
    """The row of :data:`PLANS` that makes ``request``'s epoch."""
    return next(plan for plan in PLANS if plan.selects(request))


def make_epoch_plan(
    num_samples: int,
    *,
    batch_size: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
    start: int = 0,
    stream: StreamLayout | None = None,
    draw: EpochDraw | None = None,
    buckets: np.ndarray | None = None,
) -> EpochPlan:
    """Build the :class:`EpochPlan` of one rank for one epoch (after ``start`` samples
    of the global order, see :func:`rank_order`); with ``stream``, of the streamed order
    (:mod:`turbofeed.plan.streaming`); with ``draw``, over the samples it draws for the
    epoch (resampled or weighted, :mod:`turbofeed.plan.mixing`) instead of every sample once.
    A resampled epoch is drawn lazily (:mod:`turbofeed.plan.resampled`; streamed, round by
    round, :mod:`turbofeed.plan.stream_rounds`): memory and time do not grow with ``epoch_size``.
    With ``buckets`` (the aspect-ratio bucket of each sample id), every batch of every
    rank holds one bucket (:mod:`turbofeed.plan.buckets`); not with ``stream`` or ``draw``.
    Which of these plans is made is :data:`PLANS`' choice (:func:`choose`)."""
    request = PlanRequest(num_samples, batch_size=batch_size, seed=seed, epoch=epoch, shuffle=shuffle, rank=rank,
                          world_size=world_size, drop_last=drop_last, start=start, stream=stream, draw=draw,
                          buckets=buckets)
    return choose(request).build(request)
