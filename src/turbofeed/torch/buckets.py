"""The loader's aspect-ratio buckets (``DataLoader(..., buckets=...)``): each sample's
bucket, from the image sizes the dataset index holds (:func:`turbofeed.io.sizes.image_sizes`),
for the plan (:mod:`turbofeed.plan.buckets`) to form one-bucket batches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.bucket_slots import BucketPool, BucketSlotPools
from ..io.sizes import image_sizes
from ..plan import Buckets, bucket_counts
from ..transforms import BucketResize, Compose

log = logging.getLogger("turbofeed")


@dataclass(frozen=True)
class LoaderBuckets:
    """The buckets and each sample's.

    Attributes:
        buckets: the bucket set.
        groups: int64 bucket of each global sample id.
        counts: int64 samples per bucket.
    """

    buckets: Buckets
    groups: np.ndarray
    counts: np.ndarray
    _slots: dict = field(default_factory=dict, compare=False, repr=False)  # kept across passes

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the bucketed order besides the data (the world and batch size are
        the loader's: both cut it)."""
        return {"buckets": [list(s) for s in self.buckets.sizes]}

    def slot_pool(self, transform: Compose | None, *, batch_size: int, pinned: bool,
                  capacity: int) -> Callable[[np.dtype, bool], BucketPool] | None:
        """``pool(dtype, channels_last)`` of batch slots sized per bucket when ``transform``
        gives each image its bucket's size (``BucketResize`` its last geometric op, no
        callables after it); else None (per-sample outputs, stacked when they agree)."""
        if transform is None or transform.callables or not transform.geometry \
                or not isinstance(transform.geometry[-1], BucketResize):
            return None
        sizes = transform.geometry[-1].buckets.sizes
        key = (batch_size, pinned, capacity, sizes)
        if key not in self._slots:
            self._slots[key] = BucketSlotPools(batch_size, sizes, pinned=pinned, capacity=capacity)
        return self._slots[key].pool(self.groups)


def loader_buckets(spec: str | Sequence | None, dataset: Any, transform: Compose | None, *,
                   streaming: bool, draw: Any, orient: bool = False) -> LoaderBuckets | None:
    """The buckets of ``spec`` (None: no buckets) over ``dataset``'s samples.

    Raises:
        ValueError: buckets with streaming, weights or resampling, or with ``orient``
            (``apply_exif_orientation``); a transform whose ``BucketResize`` has other
            buckets than ``spec`` or is not its first geometric op.
        DatasetError: a source whose image sizes cannot be known (``s3://`` without an index).
    """
    if spec is None:
        return None
    buckets = Buckets.make(spec)
    if streaming or draw is not None:
        raise ValueError("buckets= does not combine with streaming, weights, epoch_size or resample: "
                         "a bucketed epoch is every sample once, read in any order")
    if orient:  # the window is chosen on the upright image: a turned one would change bucket
        raise ValueError("buckets= with apply_exif_orientation=True: buckets come from each image's stored "
                         "size (the dataset index), which EXIF orientation may turn; store the images upright")
    resize = None if transform is None else next((op for op in transform.geometry if isinstance(op, BucketResize)),
                                                 None)
    if resize is not None:
        if transform is not None and transform.geometry[0] is not resize:
            raise ValueError(f"{resize!r} must be the transform's first geometric op: it picks each image's "
                             "bucket from the image's own size, as the loader's plan does")
        if _plain(resize.spec) != _plain(spec):
            raise ValueError(f"buckets={spec!r} but the transform's {resize!r} has other buckets: "
                             "give both the same value, so each batch gets one shape")
        buckets = resize.buckets  # its sizes (ratios sized to its area): an image's bucket is the same in both
    if resize is None and (transform is None or transform.size is None):
        log.warning("turbofeed: buckets=%r without transforms.BucketResize (or a fixed output size): "
                    "images keep their own sizes, and batches are lists", spec)
    heights, widths = image_sizes(dataset)
    groups = buckets.assign(heights, widths)
    counts = bucket_counts(groups, len(buckets))
    log.info("turbofeed: %d samples in %d aspect-ratio buckets: %s", len(groups), len(buckets),
             ", ".join(f"{h}x{w}: {c}" for (h, w), c in zip(buckets.sizes, counts.tolist()) if c))
    return LoaderBuckets(buckets, groups, counts)


def _plain(spec: object) -> object:
    """``spec`` with its lists and tuples alike (``[(32, 32)]`` is ``((32, 32),)``)."""
    if isinstance(spec, (list, tuple)):
        return tuple(_plain(item) for item in spec)
    return spec
