"""The maximum pixel count of an image, checked from its header before any decode.

A hostile or broken file of a few KB can declare 60000 x 60000 pixels: decoding it takes
10 GB and half a minute. Every decoder here reads the size from the header first and
raises :class:`turbofeed.errors.ImageTooLarge` (a ``ValueError``) above the limit; the
loader counts the sample as bad.

The limit follows Pillow's convention, so a user who already set Pillow's gets the same
here:

=========================== =====================================================
``TURBOFEED_MAX_PIXELS``    limit (pixels, height * width)
=========================== =====================================================
unset                       ``PIL.Image.MAX_IMAGE_PIXELS``, read when asked
                            (89478485 by default; None: no limit)
digits, e.g. ``400000000``  that number
``0`` or ``none``           no limit
=========================== =====================================================

Pillow keeps its own check for the formats it decodes (PNG, WebP, ...): it raises
``DecompressionBombError`` above twice ``PIL.Image.MAX_IMAGE_PIXELS`` whatever
``TURBOFEED_MAX_PIXELS`` says, so raise Pillow's limit to raise both.
"""

from __future__ import annotations

import enum
import os

from PIL import Image

from ..errors import ImageTooLarge

ENV = "TURBOFEED_MAX_PIXELS"


class DefaultLimit(enum.Enum):
    """Type of :data:`DEFAULT` (an enum member, so type checkers know the sentinel)."""

    READ = "max_pixels() at call time"


DEFAULT = DefaultLimit.READ
"""The ``max_pixels`` argument meaning "read :func:`max_pixels` now" (per call: loaders
read it once and pass the number)."""


def max_pixels() -> int | None:
    """The maximum pixel count (height * width) of an image turbofeed decodes; None for
    no limit. ``TURBOFEED_MAX_PIXELS`` if set (``0`` or ``none``: no limit), else
    ``PIL.Image.MAX_IMAGE_PIXELS`` (89478485 unless changed).

    Raises:
        ValueError: ``TURBOFEED_MAX_PIXELS`` is not a non-negative integer or ``none``.
    """
    value = os.environ.get(ENV)
    if value is None:
        limit = Image.MAX_IMAGE_PIXELS
        return None if limit is None else int(limit)
    text = value.strip().lower()
    if text == "none":
        return None
    if not text.isdigit():
        raise ValueError(f"{ENV}={value!r}: expected a pixel count (digits, e.g. 400000000), 0 or none")
    return int(text) or None


def resolve(limit: int | None | DefaultLimit) -> int | None:
    """``limit``, or :func:`max_pixels` for :data:`DEFAULT`."""
    return max_pixels() if limit is DEFAULT else limit


def exceeds(height: int, width: int, limit: int | None) -> bool:
    """Whether ``height * width`` is over ``limit`` (None or 0: no limit, as
    ``TURBOFEED_MAX_PIXELS=0``)."""
    return limit is not None and limit != 0 and height * width > limit


def check_pixels(height: int, width: int, limit: int | None) -> None:
    """Raise :class:`ImageTooLarge` when :func:`exceeds` says so."""
    if limit is not None and exceeds(height, width, limit):
        raise ImageTooLarge(height, width, limit)
