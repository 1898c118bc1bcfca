"""All sources of one dataset behind global sample ids ``0 .. num_samples-1``."""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from .._deps import tqdm

from ..base.executor import Executor, result_or_closed
from ..base.renamed import accepts_renamed
from ..errors import DatasetError, StorageError
from .arrays.common import parse_options
from .dsindex.auto import memory_index
from .dsindex.find import find_index
from .fingerprint import data_print
from .labels import label_ids
from .local.ranges import SampleRanges
from .paths import PathSpec
from .registry import Opener, resolve
from .source import Source

if TYPE_CHECKING:
    from ..plan.resume import DataPrint
    from .dsindex.load import DatasetIndex
    from .stores.config import S3Config
    from .stores.shards import S3Shards

log = logging.getLogger("turbofeed")


class IndexedDataset:
    """The concatenation of the sources a path spec names.

    Global id ``g`` lives in source ``k`` where ``starts[k] <= g < starts[k+1]``.
    Labels: see :func:`turbofeed.io.labels.label_ids` (integer labels kept, class names
    by their position in ``classes`` or, without it, in sorted order with a warning;
    samples without a label get ``-1``).

    Every local file is remembered by its identity; :meth:`refresh` re-indexes the ones
    that changed on disk (a loader calls it when an epoch starts).

    Args:
        spec: path, list, brace pattern, glob or folder (see :func:`turbofeed.io.resolve`).
        on_damage: ``"raise"`` or ``"skip"`` for truncated/corrupt shards.
        cache_dir: turbofeed's cache directory (the index cache, the node cache).
        format: ``"tar"``, ``"folder"``, ``"hdf5"``, ``"zarr"``, ``"npy"``, ``"parquet"`` or
            ``"tfrecord"`` for every path, instead of telling by extension (see :mod:`turbofeed.io.registry`).
        format_options: names inside HDF5/Zarr/.npy/Parquet sources (TFRecord: feature names), e.g.
            ``{"images": "pixels", "labels": "y", "keys": None}`` (see :mod:`turbofeed.io.arrays.common`).
        storage: endpoint, credentials and limits for ``s3://`` (and ``gs://``, ``az://``,
            ``https://``) shards (an :class:`~turbofeed.io.S3Config`, which configures every
            store; default: the process default); ``s3=``, its old name, is accepted for
            one release. Their
            node cache lives under ``cache_dir``.
        classes: the class names, in id order, for datasets labelled by name (``.txt``,
            JSON strings, ImageFolder folders): ``"cat"`` gets ``classes.index("cat")``
            whatever names this particular data holds, so train and val agree.
        labels: False when the caller reads members as fields (``.txt`` captions are not
            class names): no label is parsed, every sample gets -1.
        index: the dataset index (:mod:`turbofeed.io.dsindex`): None looks for it next
            to the data, then in the index cache, and for local tar shards builds it when
            no index there describes every shard as it is now (reading only the shards
            changed or added; written for the next loaders, under a lock so one process of
            a node builds it: :mod:`turbofeed.io.dsindex.auto`); a path or ``s3://`` URL
            names it (used as it is); False builds the index of the local tar shards in
            memory, by the same reads (no index looked for or used, nothing written: no
            file, lock or cache folder; ``s3://`` shards are then indexed one by one).
            Shards it describes as they are now are built from it (one ``stat`` per
            local shard, no read; ``s3://``: the listing's ETags, no GET of shard
            bytes); the others are indexed on their own, with one warning. An index that
            fails its checksum or count checks, is of an older format, or sits in the
            cache where others could have written it is not used at all (one warning;
            docs/index.md).

    Attributes:
        index: the :class:`~turbofeed.io.dsindex.DatasetIndex` used, or None.
        generation: 0, then one more each time :meth:`refresh` changed a source (what
            was learnt about samples by id, e.g. which scans were checked, is then stale).
        bad: ``{global id: why}``: samples that keep their id but are bad data for this
            dataset's use (with ``labels``: a tar sample without an image member, or whose
            label cannot be parsed or is outside int64); a loader fetching one gets a
            :class:`~turbofeed.SampleError` through ``on_error``.
    """

    @accepts_renamed
    def __init__(self, spec: PathSpec, *, on_damage: str = "skip", cache_dir: str | None = None,
                 format: str | None = None, format_options: dict | None = None,
                 storage: S3Config | None = None, classes: Sequence[str] | None = None,
                 labels: bool = True, index: str | os.PathLike | bool | None = None) -> None:
        parse_options(format_options)
        self.use_labels = labels  # a misspelt option fails before any file is opened
        self.classes = _check_classes(classes)
        located = resolve(spec, format, storage=storage)
        self._located = located
        self._opener = Opener(located, on_damage=on_damage, cache_dir=cache_dir,
                              format_options=format_options, storage=storage, classes=self.classes, labels=labels)
        self.s3: S3Shards | None = self._opener.shards
        self.index: DatasetIndex | None = None
        if index is False:  # the same index, built in memory: nothing looked up, nothing written
            self.index = memory_index(spec, located)
        else:
            named = None if index is None or index is True else os.fspath(index)
            self.index = find_index(spec, located, index=named, cache_dir=cache_dir, storage=storage)
        self.sources: list[Source] = self._open_all(located)
        _log_problems(self.sources)
        self.generation = 0
        self._join()

    def _open_all(self, located: list[tuple[str, str]]) -> list[Source]:
        """The sources the dataset index describes (no file read), then every other one,
        up to 8 at once: index files are small reads, and threads overlap their latency
        on slow disks. Raises the error of the first source (in order) that fails; the
        ones not started yet are not opened."""
        ready = {} if self.index is None else self.index.sources(located, self._opener)
        todo = [k for k in range(len(located)) if k not in ready]
        if not todo:
            return [ready[k] for k in range(len(located))]
        indexers = Executor(max(1, min(8, len(todo))), "index")
        try:
            opening = {k: indexers.submit(self._opener.open, *located[k]) for k in todo}
            for k in tqdm(todo, desc="turbofeed: indexing", unit="shard",
                          disable=True if len(todo) < 32 else None, leave=False):
                ready[k] = result_or_closed(opening[k])
            return [ready[k] for k in range(len(located))]
        finally:
            indexers.close()

    def _join(self) -> None:
        """Global ids, problems, damage and labels of the current sources."""
        located = self._located
        counts = np.array([len(s.table) for s in self.sources], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.num_samples = int(self.starts[-1])
        self._start_list = self.starts.tolist()
        self.problems = [(s.path, key, why) for s in self.sources for key, why in s.table.problems]
        self.damaged = [s.path for s in self.sources if s.damage is not None]
        # samples this loader cannot use (no image, a bad label): bad samples when fetched
        self.bad = {start + row: why for start, s in zip(self._start_list, self.sources)
                    for row, why in s.table.bad.items()}
        if self.num_samples == len(self.bad):
            names = ", ".join(p for _, p in located[:3]) + (" ..." if len(located) > 3 else "")
            raise DatasetError(f"no samples found in {names} ({len(located)} source(s); "
                               f"{len(self.problems) + len(self.bad)} entries without a usable image or label"
                               + (f"; {len(self.damaged)} damaged or empty" if self.damaged else "") + ")")
        if self.bad:
            gid, why = next(iter(self.bad.items()))
            log.warning("turbofeed: %d samples cannot be used as an image and a label (e.g. %s/%s: %s): "
                        "each is a bad sample (on_error) when its turn comes", len(self.bad),
                        *self.describe(gid), why)
        if self.use_labels:
            self.labels, self.class_names = label_ids(self.sources, self.classes)
        else:
            self.labels, self.class_names = np.full(self.num_samples, -1, np.int64), None
        self._print: DataPrint | None = None  # computed when first asked
        self._ranges: SampleRanges | None = None  # made when first asked

    def refresh(self) -> list[str]:
        """Re-index every source whose file changed on disk since it was indexed (replaced
        by rename, rewritten in place, truncated) and drop its open files and maps, so no
        read goes through the old offsets. Returns the paths re-indexed (usually none:
        one ``stat`` per local file).

        Raises:
            DatasetError: a changed file is now unreadable under ``on_damage="raise"``, or
                the dataset has no samples left.
            StorageError: a changed file cannot be opened at all (deleted, a directory in
                its place, no permission); the next call tries it again.
        """
        changed = [k for k, s in enumerate(self.sources) if s.changed()]
        for k in changed:
            path = self.sources[k].path
            log.warning("turbofeed: %s changed on disk since it was indexed; re-indexing it", path)
            self.sources[k].close()
            try:
                self.sources[k] = self._opener.open(*self._located[k])
            except OSError as exc:  # gone between passes: a storage fault, as it is during one
                why = ("deleted or renamed away" if isinstance(exc, FileNotFoundError)
                       else f"cannot be opened ({exc.strerror or exc})")
                raise StorageError(path, f"{why} since it was indexed") from exc
        if changed:
            _log_problems([self.sources[k] for k in changed])
            self.generation += 1
            self._join()
        return [self.sources[k].path for k in changed]

    def __len__(self) -> int:
        return self.num_samples

    def locate(self, gid: int) -> tuple[Source, int]:
        """The source holding global sample ``gid`` and its index there."""
        # bisect on a list: np.searchsorted costs ~5 us per scalar call, and this runs
        # once per sample holding the GIL
        k = bisect.bisect_right(self._start_list, gid) - 1
        return self.sources[k], gid - self._start_list[k]

    def read(self, gid: int) -> bytes | np.ndarray:
        source, i = self.locate(gid)
        return source.read(i)

    def view(self, gid: int) -> bytes | memoryview | np.ndarray:
        """Like :meth:`read`, without a copy where the source can (mapped tar shards)."""
        source, i = self.locate(gid)
        return source.view(i)

    def ranges(self) -> SampleRanges:
        """Where each sample's image lies on disk, by global id, for reading a chunk of
        samples in one native call (:mod:`turbofeed.io.local.ranges`); made once, again
        after a :meth:`refresh` changed a source."""
        ranges = self._ranges
        if ranges is None:
            ranges = self._ranges = SampleRanges(self.sources, self.starts, self.bad)
        return ranges

    def read_member(self, gid: int, ext: str) -> bytes | np.ndarray | None:
        """The member of sample ``gid`` with extension ``ext`` (``"txt"``, ``"json"``,
        ``"seg.png"``), or None when it has none (see :meth:`Source.read_member`)."""
        source, i = self.locate(gid)
        return source.read_member(i, ext)

    def member_exts(self, gid: int) -> tuple[str, ...]:
        """Extensions of sample ``gid``'s members, in storage order; pick a field's with
        :func:`turbofeed.io.pick_member`."""
        source, i = self.locate(gid)
        return source.member_exts(i)

    def describe(self, gid: int) -> tuple[str, str]:
        """(source path, sample key) of ``gid``, for messages."""
        source, i = self.locate(gid)
        return source.path, source.table.keys[i]

    def sample_name(self, gid: int) -> str:
        """How batches name sample ``gid`` (``return_keys``, DALI's keys, Ray's rows): its
        shard's file name and its key, ``shard-000003.tar/n01440764_10026``."""
        shard, key = self.describe(gid)
        return f"{os.path.basename(shard)}/{key}"

    def image_name(self, gid: int) -> str:
        source, i = self.locate(gid)
        return source.table.image_names[i]

    def fingerprint_fields(self) -> dict:
        """What identifies the dataset's content order: shard names and sizes, not full
        paths, so per-node copies at different paths resume alike."""
        return {"sources": [[os.path.basename(os.path.normpath(s.path)), len(s.table)]
                            for s in self.sources]}

    def content_print(self) -> DataPrint:
        """What the data holds, for resume states (:func:`turbofeed.io.fingerprint.data_print`):
        computed once, again after a :meth:`refresh` changed a source."""
        if self._print is None:
            self._print = data_print(self.sources, self.starts, self.labels)
        return self._print

    def storage_stats(self) -> dict | None:
        """Requests, retries and cache hits of the ``s3://`` shards (None without any)."""
        return None if self.s3 is None else self.s3.stats()

    def close(self) -> None:
        self._ranges = None  # its descriptors close with it
        for s in self.sources:
            s.close()
        self._opener.close()

    def __repr__(self) -> str:
        return f"IndexedDataset(samples={self.num_samples}, sources={len(self.sources)})"


def _log_problems(sources: list[Source]) -> None:
    problems = [(s.path, key, why) for s in sources for key, why in s.table.problems]
    for path, key, why in problems[:20]:
        log.warning("turbofeed: skipping %s/%s while indexing: %s", path, key, why)
    if len(problems) > 20:
        log.warning("turbofeed: ... and %d more samples skipped while indexing", len(problems) - 20)


def _check_classes(classes: Sequence[str] | None) -> list[str] | None:
    if classes is None:
        return None
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"classes must be a list of class names (str), got {classes!r:.80}")
    names = list(classes)
    if len(set(names)) != len(names):
        twice = sorted({c for c in names if names.count(c) > 1})
        raise ValueError(f"classes lists {twice[:5]} more than once; each name needs one id")
    if not names:
        raise ValueError("classes is empty; pass None to number the names found in the data")
    return names
