"""WebDataset tar shards: an index of member offsets built once (:mod:`.index`), then one
pread (or a view of the mapped file) per sample.

Compressed shards are read from a plain copy (:mod:`.compressed`). Every read checks the
file's identity against the one indexed (:mod:`.files`): a shard that vanished or changed
during a pass raises :class:`~turbofeed.errors.StorageError`, and :meth:`TarSource.changed`
tells the dataset to index it again before the next pass.
"""

from __future__ import annotations

from ...errors import DatasetError, StorageError
from ..source import Source
from ..table import SampleTable
from .compressed import compression_of, plain_copy
from .files import FILES, FileId, FileRef, file_id, views_enabled
from .index import TarDamage, default_cache_dir, load_index, report_damage, table_from_index, unreadable_index


class TarSource(Source):
    """One WebDataset tar shard, plain or compressed (``.tar.gz``/``.tgz``, bzip2, xz: read
    from a plain copy in the cache directory, see :mod:`turbofeed.io.local.compressed`).

    Args:
        path: the shard.
        on_damage: ``"raise"`` to fail on a truncated, corrupt, empty or unreadable shard
            (or one with duplicate member names) with the file and byte offset; ``"skip"``
            to keep the samples it has and log a warning (``damage`` says why).
        cache_dir: where the index (and a compressed shard's plain copy) is cached
            (default :func:`default_cache_dir`).
    """

    file: FileRef  # always a local file (the Source capability, never None here)

    def __init__(self, path: str, *, on_damage: str = "skip", cache_dir: str | None = None,
                 labels: bool = True) -> None:
        self.path = path
        cache_dir = cache_dir or default_cache_dir()
        identity = file_id(path)
        try:
            codec = compression_of(path)
        except DatasetError as exc:  # zstd: named, and reported like any unreadable shard
            index = unreadable_index(TarDamage(0, str(exc).split(": ", 1)[1], cut=False),
                                     file=identity.as_dict())
            data_path = path
        else:
            data_path = plain_copy(path, identity, cache_dir) if codec else path
            index = load_index(data_path, cache_dir)
        # ``file`` is the shard the user named, ``_data`` the file read (a compressed
        # shard's plain copy), each as it was indexed: reads check ``_data``, and a
        # change to either re-indexes (changed())
        self._data = FileRef(data_path, FileId(**index["file"]))
        self.file = self._data if data_path == path else FileRef(path, identity)
        self.damage = None if index["damage"] is None else TarDamage(*index["damage"])
        report_damage(self.damage, path, len(index["rows"]), on_damage)
        self.table = table_from_index(index, labels=labels)
        self._views = views_enabled()  # read once: os.environ costs 0.5 us per sample

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
        self._data = self.file = FileRef(path, identity)
        self.damage = damage
        report_damage(damage, path, samples, on_damage)
        self.table = table
        self._views = views_enabled()
        return self

    def changed(self) -> bool:
        """True when the shard (or its plain copy) is not the version indexed any more."""
        return self.file.changed() or (self._data is not self.file and self._data.changed())

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

    def member_exts(self, i: int) -> tuple[str, ...]:
        """Extensions of sample ``i``'s members, in storage order."""
        return self.table.exts_of(i)

    def _pread(self, offset: int, size: int) -> bytes:
        try:
            return FILES.pread_exact(self._data, size, offset)
        except StorageError as exc:
            if self._data is self.file:
                raise
            # name the shard the user knows, not only the cache's plain copy of it
            raise StorageError(self.path, f"its plain copy {exc.shard}: {exc.reason}") from exc

    def view(self, i: int) -> bytes | memoryview:
        """Sample ``i`` without a copy: a view of the mapped shard under
        ``TURBOFEED_MMAP=1``, else :meth:`read`. Valid as long as it is referenced."""
        if not self._views:
            return self.read(i)
        return FILES.view(self._data, int(self.table.sizes[i]), int(self.table.offsets[i]))

    def close(self) -> None:
        FILES.close(self._data)

    def __repr__(self) -> str:
        return f"TarSource({self.path!r}, samples={len(self.table)})"
