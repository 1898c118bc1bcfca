"""Sizes in bytes from what people write in settings: ``16777216``, ``"64MiB"``, ``"1.5 GB"``.

Units are binary whether or not they are written with an ``i``: ``16M``, ``16MiB`` and
``16MB`` are all ``16 * 2**20`` bytes, as every size setting of turbofeed reads them
(``TURBOFEED_S3_CACHE_SIZE``, the GDS client's ``buffer_pool_size`` ...).

=============  ==================================
written        bytes
=============  ==================================
``4096``       4096 (an int, or a string of one)
``"512B"``     512
``"4k"``       4096
``"16M"``      16777216 (also ``16MiB``, ``16mb``)
``"1.5 GB"``   1610612736
``"1T"``       1099511627776
=============  ==================================

Imports nothing from turbofeed: any package may use it.
"""

from __future__ import annotations

import math
from typing import Any

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class SizeError(ValueError):
    """A setting holds no usable size. The message names the setting, the value and where
    it came from: ``TURBOFEED_S3_CACHE_SIZE: must be a size >= 0 like 16777216 or '16M',
    got 'lots' (env TURBOFEED_S3_CACHE_SIZE)``.

    Attributes:
        setting: the setting's name.
        reason: what is wrong, without the setting or its source.
        source: where the value came from (``"env X"``, ``"file f.yaml"``), or None.
    """

    def __init__(self, setting: str, reason: str, source: str | None = None) -> None:
        where = f" ({source})" if source else ""
        super().__init__(f"{setting}: {reason}{where}")
        self.setting = setting
        self.reason = reason
        self.source = source


def parse_size(raw: Any, setting: str = "size", source: str | None = None, *, minimum: int = 1) -> int:
    """Bytes from an int or a size string (see the module docstring for the forms).

    Args:
        raw: the value as given (an int, or a string from a file or a variable).
        setting: its name, for the error message.
        source: where it came from, for the error message.
        minimum: the smallest size allowed (0 where an empty size means "none").

    Raises:
        SizeError: not a size, not a whole number of bytes (``"1.5"``), or below ``minimum``.
    """
    value: float | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip().upper().replace(" ", "").removesuffix("B")
        if text.endswith("I") and text[-2:-1] in ("K", "M", "G", "T"):
            text = text[:-1]
        unit = text[-1] if text and text[-1] in "KMGT" else ""
        try:
            value = float(text[:len(text) - len(unit)]) * _UNITS[unit]
        except ValueError:
            value = None
    if value is not None and not math.isfinite(value):  # "inf", "nan"
        value = None
    if value is None or value != int(value) or value < minimum:
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise SizeError(setting, f"must be a size {bound} like 16777216 or '16M', got {raw!r}", source)
    return int(value)


__all__ = ["SizeError", "parse_size"]
