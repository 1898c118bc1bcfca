"""How the order of an epoch is laid out: which samples it draws (weighted mixing,
resampling), whether it streams, and streaming's fetch stage.

Mixing: ``weights`` gives each entry of the data list (a dataset: folder, glob or
``s3://`` prefix) its share of every epoch (:class:`turbofeed.plan.EpochDraw`).

Streaming (see ``docs/streaming.md``) is on when asked (``streaming=True``) or, by
default, when the dataset's ``s3://`` shards add up to more than the node cache holds.
Its order is :func:`turbofeed.plan.streaming.stream_order` over a
:class:`~turbofeed.plan.streaming.StreamLayout` made here; its fetch stage is
:class:`turbofeed.io.stores.stream.ShardStream` (shards downloaded whole ahead of their
block, held until their last sample is read).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DatasetError, StorageError
from ..plan import EpochDraw, EpochPlan, StreamLayout
from ..plan.pieces import Pieces, cut_pieces

if TYPE_CHECKING:
    from ..io import IndexedDataset, PathSpec, S3Config
    from .run import FetchAhead

log = logging.getLogger("turbofeed")

#: Block size when there is no node cache to size it by (local shards streamed on request).
LOCAL_BLOCK_BYTES = 4 << 30
#: Most blocks a stretch of a stream mixes (:mod:`turbofeed.plan.overlap`): more makes
#: blocks, hence the stretches the fetch stage reads ahead into, shorter.
MAX_OVERLAP = 8
#: Shards a batch should draw from; fewer (the cache holds too few shards) is warned about.
DIVERSE_SHARDS = 8
#: The least bytes and samples of a piece of a shard (:mod:`turbofeed.plan.pieces`): one
#: ranged GET of ``S3Config.part_size`` (8 MiB) at least, and a few batches of samples.
PIECE_MIN_BYTES = 8 << 20
PIECE_MIN_SAMPLES = 64
#: Most blocks a stretch mixes when the units are pieces: blocks of a few pieces each, so
#: a cache of a few shards mixes many pieces (the reads ahead are counted as before).
MAX_PIECE_OVERLAP = 2 * MAX_OVERLAP
#: Pieces a stream's window should hold: pieces are no smaller than ``window / this``, so a
#: cache of many shards keeps them whole (nothing to gain) and the piece count stays small.
PIECES_PER_WINDOW = 4 * MAX_OVERLAP


def shard_bytes(dataset: IndexedDataset) -> np.ndarray:
    """Bytes of each source: a compressed shard's decompressed copy (what the node cache
    holds of it), an ``s3://`` object's size, a local file's size as it was indexed (its
    declared ``file``), else the sum of its samples' sizes."""
    from ..io.stores.shards import S3TarSource

    sizes = []
    for src in dataset.sources:
        if src.plain is not None and src.plain.size is not None:
            sizes.append(int(src.plain.size))
        elif isinstance(src, S3TarSource):
            sizes.append(int(src.info.size))
        elif src.file is not None:
            sizes.append(int(src.file.id.size))
        else:
            sizes.append(int(np.clip(src.table.sizes, 0, None).sum()))
    return np.asarray(sizes, dtype=np.int64)


def stream_layout(dataset: IndexedDataset, streaming: bool | None, *, nodes: int, ranks_per_node: int,
                  canonical_nodes: int | None = None, block_bytes: int | None = None,
                  overlap: int | None = None, ahead: int = 0) -> StreamLayout | None:
    """The layout of a streamed order, or None when the pass reads the plain order.

    ``streaming=None`` streams exactly when the ``s3://`` shards do not fit the node cache
    but two of the largest do (logged). Each stream a node reads gets ``window`` = the
    cache over those streams; a stretch of a stream mixes ``overlap`` blocks and the next
    block downloads meanwhile, so ``overlap + 1`` blocks must fit the window: blocks of
    ``window / (overlap + 1)`` bytes, no smaller than the largest shard (a block holds
    whole shards), ``overlap = window // largest - 1`` (1 to :data:`MAX_OVERLAP`) when the
    fetch stage's reads, ``ahead`` positions of this rank past the batches done, stay
    within a block, less when they may reach further (:func:`window_blocks`). Plain
    ``s3://`` shards of at least twice :func:`piece_size` are cut into pieces
    (:mod:`turbofeed.plan.pieces`), and the units above are pieces, not shards (up to
    :data:`MAX_PIECE_OVERLAP` blocks mixed). A given ``block_bytes`` (a resumed state's)
    comes with its ``overlap`` (default 1) and whole shards (see :func:`with_pieces`).

    Raises:
        StorageError: ``streaming=True`` with ``s3://`` shards that do not fit the node
            cache, which cannot hold two of the largest (the message names it and the
            bound needed): blocks could not be held, and every shard would wait for room.
    """
    nbytes = shard_bytes(dataset)
    cache = None if dataset.s3 is None else dataset.s3.cache.max_bytes
    too_small = cache is not None and len(nbytes) > 0 and cache < 2 * int(nbytes.max())
    if too_small and streaming is not False and int(nbytes.sum()) > cache:  # type: ignore[operator]
        largest = int(nbytes.argmax())
        need = 2 * int(nbytes[largest])
        if streaming:
            raise StorageError(dataset.sources[largest].path, (
                f"streaming=True needs a node cache of at least twice the largest shard (2 x {need // 2} = "
                f"{need} bytes: the block being read and the next one), but its bound is {cache} bytes; "
                f"raise it (S3Config(cache_max_bytes={need}) or TURBOFEED_S3_CACHE_SIZE={-(-need >> 20)}M), "
                "or leave streaming=None to read the samples with ranged GETs"))
        log.warning("turbofeed: the node cache (%d bytes) cannot hold two of the largest remote shards "
                    "(%d bytes each): they are read sample by sample with ranged GETs; raise "
                    "S3Config.cache_max_bytes to at least %d bytes to stream them", cache, need // 2, need)
    if streaming is None:
        streaming = cache is not None and int(nbytes.sum()) > cache and not too_small
        if streaming:
            log.info("turbofeed: the remote shards (%d bytes) exceed the node cache (%d bytes): streaming "
                     "them block by block (streaming=False reads them sample by sample instead)",
                     int(nbytes.sum()), cache)
    if not streaming:
        warn_copies_overflow(dataset)
        return None
    canonical = canonical_nodes or nodes
    if block_bytes is None:
        window = 2 * LOCAL_BLOCK_BYTES if cache is None else max(1, cache * nodes // canonical)
        # the reads' lead in one stream's positions (a rank reads every W-th position of C streams)
        per_sample = float(nbytes.sum()) / max(int(dataset.starts[-1]), 1)
        lead = ahead * ranks_per_node * nodes / canonical * per_sample
        piece_bytes = piece_size(dataset, window, nbytes)
        pieces = dataset_pieces(dataset, nbytes, piece_bytes)
        units = nbytes if pieces is None else pieces.nbytes
        most = None if pieces is None else MAX_PIECE_OVERLAP
        overlap, block_bytes = window_blocks(window, units, most, ahead_bytes=int(lead))
        if cache is not None:
            warn_low_diversity(nbytes, cache, nodes=nodes, canonical=canonical, ahead_bytes=int(lead),
                               units=None if pieces is None else units)
    else:
        piece_bytes, pieces = 0, None  # a given block size (a resumed state's): whole shards unless said
    return StreamLayout(starts=dataset.starts, shard_bytes=nbytes, canonical_nodes=canonical,
                        block_bytes=int(block_bytes), ranks_per_node=ranks_per_node, overlap=int(overlap or 1),
                        piece_bytes=int(piece_bytes) if pieces is not None else 0, pieces=pieces)


def piece_size(dataset: IndexedDataset, window: int, nbytes: np.ndarray) -> int:
    """The least bytes of a piece for a stream window of ``window`` bytes: 0 (whole
    shards) without an ``s3://`` cache, or when no shard is twice that size; else
    ``max(PIECE_MIN_BYTES, window // PIECES_PER_WINDOW)``."""
    if dataset.s3 is None or not len(nbytes):
        return 0
    size = max(PIECE_MIN_BYTES, window // PIECES_PER_WINDOW)
    return size if int(nbytes.max()) >= 2 * size else 0


def dataset_pieces(dataset: IndexedDataset, nbytes: np.ndarray, piece_bytes: int) -> Pieces | None:
    """The pieces ``piece_bytes`` cuts the dataset's shards into (:func:`turbofeed.plan.pieces.cut_pieces`;
    a pure function of the index, the same on every rank and in a resumed run), or None
    when every shard stays whole. Only plain ``s3://`` shards are cut, the others (local,
    compressed: read from a decompressed copy) stay whole."""
    if piece_bytes <= 0:
        return None
    spans = [sample_spans(src) for src in dataset.sources]
    pieces = cut_pieces(dataset.starts, nbytes, spans, piece_bytes, PIECE_MIN_SAMPLES)
    return None if len(pieces) == len(nbytes) else pieces


def sample_spans(src: object) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lo, hi)``: int64, the bytes ``[lo, hi)`` of each sample's members in a plain
    ``s3://`` shard (from its index's member table); None to keep the shard whole (not
    such a shard, no member table, a member of unknown size, samples out of order)."""
    from ..io.stores.shards import S3TarSource

    if not isinstance(src, S3TarSource) or src.plain is not None:
        return None
    table = src.table
    if not len(table) or not table.has_members:
        return None
    bounds = np.asarray(table.member_start, dtype=np.int64)
    first = bounds[:-1] - bounds[0]
    if np.any(np.diff(bounds) <= 0):
        return None  # a sample without members
    offset = np.asarray(table.member_offset[bounds[0]:bounds[-1]], dtype=np.int64)
    size = np.asarray(table.member_size[bounds[0]:bounds[-1]], dtype=np.int64)
    if np.any(size < 0):
        return None
    lo, hi = np.minimum.reduceat(offset, first), np.maximum.reduceat(offset + size, first)
    if np.any(np.diff(lo) < 0) or int(hi.max()) > int(src.info.size):
        return None
    return lo, hi


def with_pieces(layout: StreamLayout, dataset: IndexedDataset, piece_bytes: int) -> StreamLayout:
    """``layout`` with the pieces ``piece_bytes`` cuts (a resumed state's: 0 for a state
    saved before pieces existed, whose order had whole shards)."""
    pieces = dataset_pieces(dataset, np.asarray(layout.shard_bytes), int(piece_bytes))
    return dataclasses.replace(layout, piece_bytes=int(piece_bytes) if pieces is not None else 0, pieces=pieces)


def window_blocks(window: int, nbytes: np.ndarray, max_overlap: int | None = None,
                  ahead_bytes: int = 0) -> tuple[int, int]:
    """``(overlap, block_bytes)`` for a stream given ``window`` bytes of the cache, shards of
    ``nbytes`` bytes and reads that run ``ahead_bytes`` (of samples) past the batches done.

    The window holds ``t`` blocks of ``window // t`` bytes (at least the largest shard).
    A stretch of the stream (:mod:`turbofeed.plan.overlap`) reads about a block, at least
    ``block - largest`` bytes or a small shard's (the 10th percentile): the reads reach
    ``k = ceil(ahead_bytes / that)`` stretches further (at least 1: the next block
    downloads before it is read), each one more block held, so ``overlap = t - k``. The
    ``t`` giving the most overlap (at most ``max_overlap``, default :data:`MAX_OVERLAP`)
    wins; 1 (blocks of half the window: the plain block shuffle) when none gives more.
    """
    most = max(MAX_OVERLAP if max_overlap is None else max_overlap, 1)
    largest = max(int(nbytes.max()), 1) if len(nbytes) else 1
    small = max(int(np.percentile(nbytes, 10)), 1) if len(nbytes) else 1
    best = (1, max(1, window // 2))
    for t in range(3, window // largest + 1):
        block = window // t
        reach = max(1, -(-max(ahead_bytes, 0) // max(block - largest, small)))
        overlap = min(t - reach, most)
        if overlap > best[0]:
            best = (overlap, block)
    return best


def mixed_shards(nbytes: np.ndarray, cache: int, *, nodes: int, canonical: int, ahead_bytes: int = 0,
                 units: np.ndarray | None = None) -> float:
    """About how many shards a streamed batch of this node draws from, with ``cache`` bytes
    of node cache: the blocks each stretch mixes, over the mean shard, for every stream the
    node reads (:func:`window_blocks`). With ``units`` (the bytes of the ``P`` pieces the
    ``K`` shards are cut into), the ``m`` pieces mixed are drawn without replacement, so
    about ``K (1 - (1 - m/P)^(P/K))`` shards."""
    sizes = nbytes if units is None else units
    mean = max(float(sizes.mean()), 1.0) if len(sizes) else 1.0
    streams = max(canonical // max(nodes, 1), 1)
    most = None if units is None else MAX_PIECE_OVERLAP
    overlap, block = window_blocks(max(1, cache * nodes // canonical), sizes, most, ahead_bytes=ahead_bytes)
    mixed = streams * overlap * block / mean
    if units is None or not len(nbytes):
        return mixed
    k, p = len(nbytes), len(units)
    return k * (1.0 - (1.0 - min(mixed, p) / p) ** (p / k))


def warn_low_diversity(nbytes: np.ndarray, cache: int, *, nodes: int, canonical: int, ahead_bytes: int = 0,
                       units: np.ndarray | None = None) -> None:
    """Warn (once per loader, when it is made) when a streamed batch draws from fewer than
    :data:`DIVERSE_SHARDS` shards because the cache holds too few at once, naming the
    cache size that would give that many (``units``: the bytes of the pieces the shards
    are cut into, if they are, :func:`mixed_shards`)."""
    if not len(nbytes):
        return
    want = min(DIVERSE_SHARDS, len(nbytes))
    opts = dict(nodes=nodes, canonical=canonical, ahead_bytes=ahead_bytes, units=units)
    mixed = mixed_shards(nbytes, cache, **opts)  # type: ignore[arg-type]
    if mixed >= want:
        return
    unit = nbytes if units is None else units
    mean, step = max(float(nbytes.mean()), 1.0), max(int(unit.max()), 1) * canonical // max(nodes, 1)
    need = cache
    for _ in range(4 * DIVERSE_SHARDS):  # a shard (a piece) more at a time: the overlap grows with the cache
        need += step
        if mixed_shards(nbytes, need, **opts) >= want:  # type: ignore[arg-type]
            break
    held = "each shard is held whole" if units is None else "each piece of a shard is held"
    log.warning("turbofeed: streamed batches draw from about %.1f shards each (the node cache of %d bytes holds "
                "%.1f shards of %d bytes on average; %s while it is read, and the next "
                "ones download ahead): batches mix little. Raise S3Config(cache_max_bytes=...) or "
                "TURBOFEED_S3_CACHE_SIZE to %d bytes (%dM) for about %d shards per batch",
                mixed, cache, cache / mean, int(mean), held, need, -(-need >> 20), want)


def warn_copies_overflow(dataset: IndexedDataset) -> None:
    """Warn once when a pass that does not stream reads compressed shards whose
    decompressed copies cannot all be in the node cache at once: a shuffled order then
    evicts and decompresses them again and again (once per change of shard at worst).
    Each copy's size is at least the end of its last sample."""
    copies = [(s.plain, s.table) for s in dataset.sources if s.plain is not None]
    if len(copies) < 2:
        return
    bound = copies[0][0].cache.max_bytes
    least = sum(int((t.offsets.astype(np.int64) + t.sizes).max()) for _, t in copies if len(t))
    if least > bound:
        log.warning("turbofeed: the decompressed copies of %d compressed shards (at least %d bytes) do not "
                    "fit in the node cache (%d bytes): a shuffled epoch decompresses shards again and again. "
                    "Raise TURBOFEED_S3_CACHE_SIZE / S3Config(cache_max_bytes=) above their total, stream them "
                    "(s3://, streaming=True) or store plain .tar shards", len(copies), least, bound)


def fetch_stage(dataset: IndexedDataset, plan: EpochPlan, layout: StreamLayout | None,
                prefetch: int = 2) -> FetchAhead | None:
    """The fetch stage of a streamed pass over ``s3://`` shards (None otherwise);
    ``prefetch``: the pass's batches in flight (how far its reads run ahead)."""
    if layout is None or dataset.s3 is None:
        return None
    from ..io.stores.stream import stream_shards

    # a streamed plan's order: an array, or a resampled epoch's RoundsRankOrder (read by rounds)
    return stream_shards(dataset.s3, dataset.sources, dataset.starts, plan.order,  # type: ignore[arg-type]
                         concurrency=max(2, dataset.s3.config.prefetch_shards),
                         ahead=(prefetch + 2) * plan.batch_size, blocks=plan.blocks, pieces=layout.pieces)


def epoch_draw(dataset: IndexedDataset, data: PathSpec, *, weights: Sequence[float] | None, epoch_size: int | None,
               resample: bool, format: str | None = None, storage: S3Config | None = None) -> EpochDraw | None:
    """The draw of every epoch, or None for every sample once.

    ``weights`` needs ``data`` to be a list with one weight per entry; each entry's
    sources (resolved again, one listing each) form its group.

    Raises:
        ValueError: weights that do not match the data list; a bad ``epoch_size``.
    """
    if weights is None and epoch_size is None and not resample:
        return None
    if epoch_size is not None and (isinstance(epoch_size, bool) or not isinstance(epoch_size, int) or epoch_size < 1):
        raise ValueError(f"epoch_size must be a positive int, got {epoch_size!r}")
    groups = None
    if weights is not None:
        items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
        if len(items) != len(weights):
            raise ValueError(f"weights has {len(weights)} entries but the data list {len(items)}: give one "
                             f"weight per dataset, e.g. data=['s3://a/', 's3://b/'], weights=[0.7, 0.3]")
        from ..io import resolve

        counts = [len(resolve(item, format, storage=storage)) for item in items]
        if sum(counts) != len(dataset.sources):
            raise DatasetError(f"the data lists {sum(counts)} sources now, {len(dataset.sources)} when it was "
                               "opened (changed meanwhile?)")
        groups = np.repeat(np.arange(len(items)), counts).astype(np.int64)
        weights = tuple(float(w) for w in weights)
    return EpochDraw(shard_sizes=np.diff(dataset.starts), groups=groups, weights=weights, epoch_size=epoch_size,
                     resample=resample)
