"""One builder of a pass: every front-end assembles its engine here.

A front-end (:class:`turbofeed.DataLoader`, :class:`turbofeed.Pipeline`, the DALI
reader's :class:`~turbofeed.dali.batches.DatasetBatches`) decides its
options once and describes each pass with one frozen :class:`PassOptions` (the data,
the transform the worker threads run, the decoder, the threads) and the batch stages of
its own (the DataLoader's tensors and GPU copy, the Pipeline's samples; the DALI
reader has none: its samples are what it reads).
:func:`build_pass` then makes the stages in one place, in the order they run:

1. ``fetch``: streamed shards downloaded ahead of the plan (``s3://`` and the other
   stores; :func:`~turbofeed.engine.layout.fetch_stage`), where the data is streamed;
2. ``decode``: the stage :func:`~turbofeed.engine.choose.decode_stage` chooses from the
   options (per chunk or per sample, CPU or GPU, with fields and user callables);
3. the front-end's batch stages.

A new stage or option is wired here once, not in each front-end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan import EpochPlan, StreamLayout
from ..transforms import Compose
from .choose import decode_stage
from .layout import fetch_stage
from .policy import PassPolicy
from .run import BatchStage, Engine
from .stats import Stats
from .work import Decoded, SampleWork

if TYPE_CHECKING:
    from ..decode.field_specs import FieldOptions
    from ..io import IndexedDataset


@dataclass(frozen=True)
class PassOptions:
    """What one pass is built from; frozen, so a pass cannot change its front-end's.

    Attributes:
        dataset: the opened dataset (:class:`turbofeed.io.IndexedDataset`).
        stats: where the pass counts.
        batch_size: positions per batch of the plan.
        num_workers: worker threads (0: in the caller's thread).
        prefetch: batches in flight.
        seed: of the crops' and flips' draws.
        transform: what the worker threads run (the fused part, without what the
            front-end does at delivery), or None.
        fields: general samples' fields, or None.
        orient: turn images upright by their EXIF orientation first.
        user_errors: what an exception from the user's code becomes.
        channels_last: slots hold HWC rows.
        timeout: seconds a batch may take (0: no limit).
        layout: the streamed shards' layout, or None (not streamed).
        decoder: the GPU decoder, or None (CPU).
        hybrid: the GPU/CPU split (:class:`~turbofeed.engine.hybrid.HybridSplit`), or None.
        pool: the batch slots' maker (one output size), or None (per-sample outputs).
        shape: per-sample output of a decoded sample, where batches are not stacked.
        fetch_only: no decode: ``fetch_only(id, bytes)`` per sample.
        read: no fetch of the sample's image and no decode: ``read(id)`` per sample (a
            front-end reading the members itself: the DALI reader).
        callables: the user's per-sample callables after the fused decode.
    """

    dataset: IndexedDataset
    stats: Stats
    batch_size: int
    num_workers: int
    prefetch: int = 2
    seed: int = 0
    transform: Compose | None = None
    fields: FieldOptions | None = None
    orient: bool = False
    user_errors: str = "raise"
    channels_last: bool = False
    timeout: float = 0
    layout: StreamLayout | None = None
    decoder: Any = None
    hybrid: Any = None
    pool: Callable[..., Any] | None = None
    shape: Callable[[int, Decoded], Any] | None = None
    fetch_only: Callable[[int, Any], Any] | None = None
    callables: Sequence[Callable[[Any], Any]] = ()
    read: Callable[[int], Any] | None = None


def build_pass(options: PassOptions, plan: EpochPlan, policy: PassPolicy, *, epoch: int,
               then: Sequence[BatchStage] = (), start: int = 0) -> Engine:
    """The engine of one pass over ``plan`` (epoch ``epoch``) from its batch ``start``,
    its stages in the module docstring's order, ``then`` last; ``policy`` is the pass's
    bad-sample policy, shared by its threads and stages."""
    image_field = None if options.fields is None else options.fields.image()
    work = SampleWork(options.dataset, options.transform, options.stats, seed=options.seed, epoch=epoch,
                      image_exts=None if image_field is None else image_field.exts, orient=options.orient)
    decode = decode_stage(work, plan, policy, batch_size=options.batch_size, decoder=options.decoder,
                          hybrid=options.hybrid, pool=options.pool, channels_last=options.channels_last,
                          shape=options.shape, fetch_only=options.fetch_only, callables=options.callables,
                          fields=options.fields, user_errors=options.user_errors, num_workers=options.num_workers,
                          read=options.read)
    fetch = fetch_stage(options.dataset, plan, options.layout, options.prefetch)
    return Engine(plan, decode, policy, then=then, num_workers=options.num_workers, prefetch=options.prefetch,
                  timeout=options.timeout, fetch=fetch, start=start)
