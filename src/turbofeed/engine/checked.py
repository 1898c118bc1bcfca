"""Which samples' JPEG scans were found intact: checked once, remembered per source.

The native crop decoder reads a JPEG only down to the crop's last row; damage in the
entropy-coded data below it would go unseen in one epoch and be met in the next, so the
same sample would be good in one epoch and bad in another. The first time a sample is
decoded, its whole scan is checked (:func:`turbofeed.decode.native.crop_resize` with
``check_scan=True``; the GPU path: :func:`turbofeed.decode.scan.check`), and a sample
found intact is remembered here; later epochs stop after the crop as before. A damaged
sample is not remembered: it is checked, and found bad, every time.

One bit per sample, kept per source object (a shard, a folder): a source opened anew
(a file replaced, a re-index) starts unchecked. 1.28M samples take 160 KB.
"""

from __future__ import annotations

import threading
import weakref


class CheckedScans:
    """Thread-safe set of ``(source, index)`` pairs whose scan was checked intact.

    Setting a bit is a read-modify-write of one byte; two threads marking two samples of
    the same byte at once can lose one mark. That costs one more check of that sample
    later, never a wrong answer, so no lock is taken per sample.
    """

    def __init__(self) -> None:
        self._bits: weakref.WeakKeyDictionary[object, bytearray] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # only when a source is first seen

    def intact(self, source: object, index: int) -> bool:
        """Whether the scan of sample ``index`` of ``source`` was checked intact before."""
        bits = self._bits.get(source)
        return bits is not None and index >> 3 < len(bits) and bool(bits[index >> 3] & (1 << (index & 7)))

    def mark(self, source: object, index: int, size: int) -> None:
        """Remember that sample ``index`` of ``source`` (which holds ``size`` samples) is intact."""
        bits = self._bits.get(source)
        if bits is None:
            with self._lock:
                bits = self._bits.get(source)
                if bits is None:
                    bits = bytearray((max(size, index + 1) + 7) >> 3)
                    try:
                        self._bits[source] = bits
                    except TypeError:  # a source that cannot be weakly referenced: not remembered
                        return
        if index >> 3 < len(bits):
            bits[index >> 3] |= 1 << (index & 7)


CHECKED = CheckedScans()
"""The process's verdicts (sources are shared by every loader of a dataset)."""
