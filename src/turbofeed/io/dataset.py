"""All sources of one dataset behind global sample ids ``0 .. num_samples-1``."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm.auto import tqdm

from ..errors import DatasetError
from .folder import FolderSource
from .paths import PathSpec, resolve
from .source import Source
from .tar import TarSource

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
    """

    def __init__(self, spec: PathSpec, *, on_damage: str = "skip", cache_dir: str | None = None) -> None:
        located = resolve(spec)

        def open_one(item: tuple[str, str]) -> Source:
            kind, path = item
            if kind == "tar":
                return TarSource(path, on_damage=on_damage, cache_dir=cache_dir)
            return FolderSource(path)

        # Index files are small reads: threads overlap their latency on slow disks.
        with ThreadPoolExecutor(max_workers=min(8, len(located))) as pool:
            self.sources: list[Source] = list(tqdm(
                pool.map(open_one, located), total=len(located), desc="turbofeed: indexing",
                unit="shard", disable=True if len(located) < 32 else None, leave=False))
        counts = np.array([len(s.table) for s in self.sources], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.num_samples = int(self.starts[-1])
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
        k = int(np.searchsorted(self.starts, gid, side="right")) - 1
        return self.sources[k], int(gid - self.starts[k])

    def read(self, gid: int) -> bytes:
        source, i = self.locate(gid)
        return source.read(i)

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

    def close(self) -> None:
        for s in self.sources:
            s.close()

    def __repr__(self) -> str:
        return f"Dataset(samples={self.num_samples}, sources={len(self.sources)})"
