"""``BucketResize``: each image to the output size of its aspect-ratio bucket.

With ``DataLoader(..., buckets=...)`` every batch holds images of one bucket
(:mod:`turbofeed.plan.buckets`); this op sizes each image to its bucket's
``(height, width)``: scaled so it covers that size (aspect kept), then the centre cut,
as ``Resize`` then ``CenterCrop`` would with the bucket's size. The bucket comes from the
image's header size, as the loader's plan took it from the index, so every image of a
batch gets the batch's shape and batches stack into one tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..plan.buckets import Buckets
from .draws import Uniforms
from .geometry import GeometricOp
from .views import View, Views


class BucketResize(GeometricOp):
    """Resize and centre-crop each image to its aspect-ratio bucket's size.

    Args:
        buckets: ``"aspect"`` (SDXL's nine sizes near 1024x1024), a list of
            ``(height, width)``, or of aspect ratios (width / height) sized to ``area``:
            the same value as the loader's ``buckets``.
        area: pixels per image for buckets given as ratios.
        multiple: what their sides are a multiple of (64 suits VAEs and patch sizes).

    It must be the first geometric op (the bucket is chosen from the image's own size);
    crops after it change every bucket's size alike.
    """

    def __init__(self, buckets: str | Sequence = "aspect", *, area: int = 1024 * 1024, multiple: int = 64) -> None:
        self.spec = buckets
        self.buckets = Buckets.make(buckets, area=area, multiple=multiple)
        self._sizes = np.array([(w, h) for h, w in self.buckets.sizes], np.int64).reshape(-1, 2).T.copy()  # (2, buckets)

    def apply(self, view: View, draws: Uniforms) -> View:
        oh, ow = self.buckets.sizes[self.buckets.of(view.height, view.width)]
        if view.height <= 0 or view.width <= 0:
            return View(view.box, oh, ow)
        scale = max(oh / view.height, ow / view.width)  # cover the bucket's size, aspect kept
        h, w = min(view.height, oh / scale), min(view.width, ow / scale)  # the cut, in view pixels
        top, left = (view.height - h) / 2.0, (view.width - w) / 2.0
        return View(view.sub_box(top, left, h, w), oh, ow)

    def apply_many(self, views: Views, draws: np.ndarray) -> Views:
        """:meth:`apply` of a chunk: the buckets from :meth:`Buckets.assign
        <turbofeed.plan.buckets.Buckets.assign>`, which matches :meth:`Buckets.of`."""
        out = self._sizes[:, self.buckets.assign(views.height, views.width)]  # (2, n): width, height
        ratios = out / views.sizes
        scale = np.maximum(ratios[0], ratios[1])  # max(oh / height, ow / width): the same value
        extents = np.minimum(views.sizes, out / scale)
        return views.sub((views.sizes - extents) / 2.0, extents, out)

    def __repr__(self) -> str:
        return f"BucketResize({self.spec!r})"
