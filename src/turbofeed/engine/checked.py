"""Which samples' JPEG scans were found intact: checked once, remembered per dataset.

The native crop decoder reads a JPEG only down to the crop's last row; damage in the
entropy-coded data below it would go unseen in one epoch and be met in the next, so the
same sample would be good in one epoch and bad in another. So a sample is decoded with
its whole scan checked until it is known intact (:func:`turbofeed.decode.native.crop_resize`
with ``check_scan=True``, or per chunk :func:`turbofeed.decode.native.run_chunk`; the GPU
path: :func:`turbofeed.decode.scan.check`); then decodes stop after the crop. A damaged
sample is never known intact: it is checked, and found bad, every time.

Known intact from the start: the samples the dataset index found intact when it was
built (its build threads check every JPEG's scan with the same native check:
:mod:`turbofeed.io.dsindex.parts`), so a new process's first epoch decodes as later
epochs do. The verdict holds for the bytes the index describes: a shard that changed
since is not taken from the index (its samples start unchecked), and one that changes
during a pass fails its reads' identity check (a storage error, never its old verdict).
Samples of sources without an index (folders, array formats, shards it does not
describe) are checked the first time a loader of this process decodes them, then
remembered here (in memory only).

One flag per sample id, kept per dataset as a NumPy bool array (so a chunk reads and
sets its flags in one operation): a dataset whose sources changed (a file replaced, a
re-index: :attr:`turbofeed.io.IndexedDataset.generation`) starts again from its index's
verdicts. 1.28M samples take 1.3 MB.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..decode.native import SCAN_INTACT
from ..io import IndexedDataset


def indexed_intact(dataset: IndexedDataset) -> np.ndarray:
    """A new bool array by sample id of ``dataset``: True where the dataset index found the
    sample's whole scan intact (its tables' ``scans``), False elsewhere."""
    flags = np.zeros(len(dataset), dtype=bool)
    for start, source in zip(dataset.starts.tolist(), dataset.sources):
        scans = source.table.scans
        if scans is not None:
            flags[start:start + len(scans)] = np.asarray(scans) == SCAN_INTACT
    return flags


class CheckedScans:
    """Thread-safe record of the sample ids of each dataset whose scan was checked intact.

    Flags are bytes, written without a lock: two threads marking two samples at once
    never lose a mark nor set one they did not mean to.
    """

    def __init__(self) -> None:
        self._flags: weakref.WeakKeyDictionary[IndexedDataset, tuple[int, np.ndarray]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # only when a dataset (or its generation) is first seen

    def flags(self, dataset: IndexedDataset) -> np.ndarray:
        """The bool array of ``dataset``'s current generation, by sample id (set items to
        mark them; read it to ask), first the index's verdicts (:func:`indexed_intact`)."""
        found = self._flags.get(dataset)
        if found is not None and found[0] == dataset.generation:
            return found[1]
        with self._lock:
            found = self._flags.get(dataset)
            if found is None or found[0] != dataset.generation:
                found = self._flags[dataset] = (dataset.generation, indexed_intact(dataset))
        return found[1]

    def intact(self, dataset: IndexedDataset, gid: int) -> bool:
        """Whether the scan of sample ``gid`` was checked intact before."""
        return bool(self.flags(dataset)[gid])

    def mark(self, dataset: IndexedDataset, gid: int) -> None:
        """Remember that sample ``gid``'s scan is intact."""
        self.flags(dataset)[gid] = True


CHECKED = CheckedScans()
"""The process's verdicts (a dataset is shared by every loader made from it)."""
