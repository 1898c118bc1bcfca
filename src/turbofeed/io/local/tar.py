"""WebDataset tar shards: an index of member offsets (:mod:`.index`; loaders take it from
the dataset index, :mod:`turbofeed.io.dsindex`), then one pread (or a view of the mapped
file) per sample.

Compressed shards are read from a plain copy in the node cache (:mod:`.compressed`),
bounded and evictable. Every read checks the file's identity against the one indexed
(:mod:`.files`): a shard that vanished or changed during a pass raises
:class:`~turbofeed.errors.StorageError`, and :meth:`TarSource.changed` tells the dataset
to index it again before the next pass.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from ...base.renamed import accepts_renamed
from ...errors import DatasetError
from ..source import Source
from ..table import SampleTable
from .compressed import PlainCopy, compression_of, index_plain, local_plain_copy, node_cache
from .files import FILES, FileId, FileRef, file_id, views_enabled
from .index import (TarDamage, default_cache_dir, index_shard, report_damage, table_from_index, unreadable_index,
                    without_images)

if TYPE_CHECKING:
    from ..stores.config import S3Config


class TarSource(Source):
    """One WebDataset tar shard, plain or compressed (``.tar.gz``/``.tgz``, bzip2, xz: read
    from a plain copy in the node cache, ``plain``, see :mod:`turbofeed.io.local.compressed`).

    Args:
        path: the shard.
        on_damage: ``"raise"`` to fail on a truncated, corrupt, empty or unreadable shard
            (or one with duplicate member names) with the file and byte offset; ``"skip"``
            to keep the samples it has and log a warning (``damage`` says why).
        cache_dir: where a compressed shard's plain copy (in the node cache ``cache_dir/s3``)
            and its index are cached (default :func:`default_cache_dir`). A plain shard's
            index is built in memory (a loader takes it from the dataset index instead).
        storage: the :class:`~turbofeed.io.S3Config` whose ``cache_max_bytes`` bounds the
            node cache (default: the process's, see
            :func:`turbofeed.io.stores.config.cache_limit`); ``s3=``, its old name, is
            accepted for one release.
    """

    file: FileRef  # always a local file (the Source capability, never None here)
    #: a compressed shard's decompressed copy (None for a plain shard)
    plain: PlainCopy | None = None

    @property
    def ranges(self) -> bool:  # type: ignore[override]
        """A plain shard's samples are byte ranges of ``file`` (a compressed one's are in
        its plain copy, which may be evicted: read through :meth:`read`)."""
        return self.plain is None

    @accepts_renamed
    def __init__(self, path: str, *, on_damage: str = "skip", cache_dir: str | None = None,
                 labels: bool = True, storage: S3Config | None = None) -> None:
        self.path = path
        cache_dir = cache_dir or default_cache_dir()
        identity = file_id(path)
        try:
            codec = compression_of(path)
        except DatasetError as exc:  # zstd: named, and reported like any unreadable shard
            index = unreadable_index(TarDamage(0, str(exc).split(": ", 1)[1], cut=False),
                                     file=identity.as_dict())
        else:
            index = self._compressed_index(identity, cache_dir, storage) if codec else index_shard(path)
        # the shard as it was indexed: reads check it (a compressed shard's when its copy
        # is made), and a change re-indexes (changed())
        self.file = FileRef(path, FileId(**index["file"]))
        damage = None if index["damage"] is None else TarDamage(*index["damage"])
        self.table = table_from_index(index, labels=labels, read=lambda size, offset: self._pread(offset, size))
        if labels:
            self.table, damage = without_images(self.table, damage)
        self.damage = damage
        report_damage(damage, path, len(self.table), on_damage)
        self._views = views_enabled()  # read once: os.environ costs 0.5 us per sample

    def _compressed_index(self, identity: FileId, cache_dir: str, storage: S3Config | None) -> dict:
        """The index of the compressed shard's plain copy (cached by the shard's identity),
        and ``plain``; the copy is pinned while it is indexed, then left in the node cache
        unpinned until a read needs it.

        Raises:
            StorageError: the copy does not fit in the node cache.
        """
        plain = local_plain_copy(self.path, identity, node_cache(cache_dir, storage))
        key = {"file": identity.as_dict(), "plain_copy": True}
        index = index_plain(plain, key, _plain_index_path(cache_dir, self.path), self.path)
        self.plain = plain
        return index

    @classmethod
    def indexed(cls, path: str, identity: FileId, table: SampleTable, damage: TarDamage | None, *,
                samples: int, on_damage: str = "skip") -> TarSource:
        """The source of a plain shard whose table comes from a dataset index
        (:mod:`turbofeed.io.dsindex`), the file at ``path`` having ``identity`` now
        (checked by the caller): nothing is read here. ``samples`` is the count the
        index found before any damage (the damage message names it).

        Raises:
            DatasetError: ``damage`` under ``on_damage="raise"``.
        """
        self = cls.__new__(cls)
        self.path = path
        self.file = FileRef(path, identity)
        self.damage = damage
        report_damage(damage, path, samples, on_damage)
        self.table = table
        self._views = views_enabled()
        return self

    def changed(self) -> bool:
        """True when the shard is not the version indexed any more."""
        return self.file.changed()

    def read(self, i: int) -> bytes:
        """Encoded bytes of sample ``i`` with one positional read (releases the GIL).

        Raises:
            StorageError: the shard (or its plain copy) vanished, was replaced, rewritten
                or truncated since it was indexed, or the read failed.
        """
        return self._pread(int(self.table.offsets[i]), int(self.table.sizes[i]))

    def read_member(self, i: int, ext: str) -> bytes | None:
        """The payload of sample ``i``'s member with extension ``ext`` (as
        :func:`~turbofeed.io.split_key` gives it: ``"txt"``, ``"seg.png"``) with one
        positional read, or None when the sample has no such member. Raises as :meth:`read`."""
        found = self.table.find_member(i, ext)
        return None if found is None else self._pread(*found)

    def head(self, i: int, size: int) -> bytes:
        """The first ``size`` bytes of sample ``i``'s image (raises as :meth:`read`)."""
        return self._pread(int(self.table.offsets[i]), min(size, int(self.table.sizes[i])))

    def member_exts(self, i: int) -> tuple[str, ...]:
        """Extensions of sample ``i``'s members, in storage order."""
        return self.table.exts_of(i)

    def _pread(self, offset: int, size: int) -> bytes:
        if self.plain is not None:
            return self.plain.pread(offset, size)  # its errors name this shard
        return FILES.pread_exact(self.file, size, offset)

    def view(self, i: int) -> bytes | memoryview:
        """Sample ``i`` without a copy: a view of the mapped shard under
        ``TURBOFEED_MMAP=1``, else :meth:`read` (always for a compressed shard: its copy
        may be evicted). Valid as long as it is referenced."""
        if not self._views or self.plain is not None:
            return self.read(i)
        return FILES.view(self.file, int(self.table.sizes[i]), int(self.table.offsets[i]))

    def close(self) -> None:
        if self.plain is not None:
            self.plain.release()
        FILES.close(self.file)

    def __repr__(self) -> str:
        return f"TarSource({self.path!r}, samples={len(self.table)})"


def _plain_index_path(cache_dir: str, path: str) -> str:
    """Where the index of a compressed shard's plain copy is cached: building it means
    decompressing the whole shard, so it is kept (the dataset index lists compressed
    shards without their samples)."""
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:20]
    return os.path.join(cache_dir, "compressed-index", f"{digest}.json")
