"""Which samples' JPEG scans were found intact: checked once, remembered per dataset.

The native crop decoder reads a JPEG only down to the crop's last row; damage in the
entropy-coded data below it would go unseen in one epoch and be met in the next, so the
same sample would be good in one epoch and bad in another. The first time a sample is
decoded, its whole scan is checked (:func:`turbofeed.decode.native.crop_resize` with
``check_scan=True``, or per chunk :func:`turbofeed.decode.native.run_chunk`; the GPU
path: :func:`turbofeed.decode.scan.check`), and a sample found intact is remembered here;
later epochs stop after the crop as before. A damaged sample is not remembered: it is
checked, and found bad, every time.

One flag per sample id, kept per dataset as a NumPy bool array (so a chunk reads and
sets its flags in one operation): a dataset whose sources changed (a file replaced, a
re-index: :attr:`turbofeed.io.Dataset.generation`) starts unchecked. 1.28M samples take
1.3 MB.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..io import Dataset


class CheckedScans:
    """Thread-safe record of the sample ids of each dataset whose scan was checked intact.

    Flags are bytes, written without a lock: two threads marking two samples at once
    never lose a mark nor set one they did not mean to.
    """

    def __init__(self) -> None:
        self._flags: weakref.WeakKeyDictionary[Dataset, tuple[int, np.ndarray]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # only when a dataset (or its generation) is first seen

    def flags(self, dataset: Dataset) -> np.ndarray:
        """The bool array of ``dataset``'s current generation, by sample id (set items to
        mark them; read it to ask)."""
        found = self._flags.get(dataset)
        if found is not None and found[0] == dataset.generation:
            return found[1]
        with self._lock:
            found = self._flags.get(dataset)
            if found is None or found[0] != dataset.generation:
                found = self._flags[dataset] = (dataset.generation, np.zeros(len(dataset), dtype=bool))
        return found[1]

    def intact(self, dataset: Dataset, gid: int) -> bool:
        """Whether the scan of sample ``gid`` was checked intact before."""
        return bool(self.flags(dataset)[gid])

    def mark(self, dataset: Dataset, gid: int) -> None:
        """Remember that sample ``gid``'s scan is intact."""
        self.flags(dataset)[gid] = True


CHECKED = CheckedScans()
"""The process's verdicts (a dataset is shared by every loader made from it)."""
