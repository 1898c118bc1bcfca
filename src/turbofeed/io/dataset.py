"""All sources of one dataset behind global sample ids ``0 .. num_samples-1``."""

from __future__ import annotations

import bisect
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from ..errors import DatasetError
from .arrays import parse_options
from .folder import FolderSource
from .formats import ARRAY_FORMATS, open_source
from .paths import PathSpec, resolve
from .source import Source
from .tar import TarSource

if TYPE_CHECKING:
    from .s3 import S3Shards
    from .s3client import S3Config

log = logging.getLogger("turbofeed")


class Dataset:
    """The concatenation of the sources a path spec names.

    Global id ``g`` lives in source ``k`` where ``starts[k] <= g < starts[k+1]``.
    Integer labels are kept; class names (``.txt``/JSON strings) become ids in sorted
    name order; samples without a label get ``-1``.

    Args:
        spec: path, list, brace pattern, glob or folder (see :func:`turbofeed.io.paths.resolve`).
        on_damage: ``"raise"`` or ``"skip"`` for truncated/corrupt shards.
        cache_dir: tar index cache directory.
        format: ``"tar"``, ``"folder"``, ``"hdf5"``, ``"zarr"``, ``"npy"`` or ``"parquet"`` for
            every path, instead of telling by extension (see :mod:`turbofeed.io.formats`).
        format_options: names inside HDF5/Zarr/.npy/Parquet sources, e.g.
            ``{"images": "pixels", "labels": "y", "keys": None}`` (see :mod:`turbofeed.io.arrays`).
        s3: endpoint, credentials and limits for ``s3://`` shards (an
            :class:`~turbofeed.io.s3client.S3Config`; default: the process default). Their
            node cache lives under ``cache_dir``.
    """

    def __init__(self, spec: PathSpec, *, on_damage: str = "skip", cache_dir: str | None = None,
                 format: str | None = None, format_options: dict | None = None,
                 s3: S3Config | None = None) -> None:
        parse_options(format_options)  # a misspelt option fails before any file is opened
        located = resolve(spec, format, s3=s3)
        remote = [path for kind, path in located if kind == "s3"]
        self.s3: S3Shards | None = None
        if remote:
            from .s3 import S3Shards

            self.s3 = S3Shards(remote, config=s3, cache_dir=cache_dir)

        def open_one(item: tuple[str, str]) -> Source:
            kind, path = item
            if kind == "tar":
                return TarSource(path, on_damage=on_damage, cache_dir=cache_dir)
            if kind == "s3":
                return self.s3.open(path, on_damage=on_damage)
            if kind in ARRAY_FORMATS:
                return open_source(kind, path, format_options, s3=s3)
            return FolderSource(path)

        # Index files are small reads: threads overlap their latency on slow disks.
        with ThreadPoolExecutor(max_workers=min(8, len(located))) as pool:
            self.sources: list[Source] = list(tqdm(
                pool.map(open_one, located), total=len(located), desc="turbofeed: indexing",
                unit="shard", disable=True if len(located) < 32 else None, leave=False))
        counts = np.array([len(s.table) for s in self.sources], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.num_samples = int(self.starts[-1])
        self._start_list = self.starts.tolist()
        self.problems = [(s.path, key, why) for s in self.sources for key, why in s.table.problems]
        for path, key, why in self.problems[:20]:
            log.warning("turbofeed: skipping %s/%s while indexing: %s", path, key, why)
        if len(self.problems) > 20:
            log.warning("turbofeed: ... and %d more samples skipped while indexing",
                        len(self.problems) - 20)
        self.damaged = [s.path for s in self.sources if getattr(s, "damage", None) is not None]
        if self.num_samples == 0:
            names = ", ".join(p for _, p in located[:3]) + (" ..." if len(located) > 3 else "")
            raise DatasetError(f"no samples found in {names} ({len(located)} source(s); "
                               f"{len(self.problems)} entries without a usable image)")
        self.labels, self.class_names = self._label_array()

    def _label_array(self) -> tuple[np.ndarray, list[str] | None]:
        raw = [label for s in self.sources for label in s.table.labels]
        names = sorted({x for x in raw if isinstance(x, str)})
        if not names:
            return np.array([-1 if x is None else x for x in raw], dtype=np.int64), None
        ids = {name: i for i, name in enumerate(names)}
        return np.array([-1 if x is None else ids.get(x, x) for x in raw], dtype=np.int64), names

    def __len__(self) -> int:
        return self.num_samples

    def locate(self, gid: int) -> tuple[Source, int]:
        """The source holding global sample ``gid`` and its index there."""
        # bisect on a list: np.searchsorted costs ~5 us per scalar call, and this runs
        # once per sample holding the GIL
        k = bisect.bisect_right(self._start_list, gid) - 1
        return self.sources[k], gid - self._start_list[k]

    def read(self, gid: int) -> bytes:
        source, i = self.locate(gid)
        return source.read(i)

    def view(self, gid: int) -> bytes | memoryview | np.ndarray:
        """Like :meth:`read`, without a copy where the source can (mapped tar shards)."""
        source, i = self.locate(gid)
        view = getattr(source, "view", None)
        return source.read(i) if view is None else view(i)

    def describe(self, gid: int) -> tuple[str, str]:
        """(source path, sample key) of ``gid``, for messages."""
        source, i = self.locate(gid)
        return source.path, source.table.keys[i]

    def image_name(self, gid: int) -> str:
        source, i = self.locate(gid)
        return source.table.image_names[i]

    def fingerprint_fields(self) -> dict:
        """What identifies the dataset's content order: shard names and sizes, not full
        paths, so per-node copies at different paths resume alike."""
        return {"sources": [[os.path.basename(os.path.normpath(s.path)), len(s.table)]
                            for s in self.sources]}

    def storage_stats(self) -> dict | None:
        """Requests, retries and cache hits of the ``s3://`` shards (None without any)."""
        return None if self.s3 is None else self.s3.stats()

    def close(self) -> None:
        for s in self.sources:
            s.close()
        if self.s3 is not None:
            self.s3.close()

    def __repr__(self) -> str:
        return f"Dataset(samples={self.num_samples}, sources={len(self.sources)})"
