"""The one small interface every storage backend implements, and what it may declare.

Required of a source: ``path``, ``table``, ``read(i)`` and ``close()``. Optional
capabilities are declared here, with the defaults a source gets when it does not have
them, so that the dataset reads them directly and never probes with ``getattr``:

=======================  ============================  ====================================
capability               default                       overridden by
=======================  ============================  ====================================
``view(i)``              ``read(i)``                   tar shards (a view of the mapped
                                                       file)
``read_member(i, ext)``  the image only: its           tar shards, local and ``s3://``
                         extension -> ``read(i)``,     (every member of the sample, from
                         any other -> None             the ``member_*`` arrays of ``table``)
``member_exts(i)``       the image's extension alone   tar shards, local and ``s3://``
``damage``               None (nothing to report)      tar shards, local and ``s3://``
``file``                 None (no local file)          tar shards, HDF5, ``.npy``, Parquet
``changed()``            ``file`` is not the version   tar shards (the shard or its plain
                         indexed any more              copy)
``classes``              None (labels are raw values)  ImageFolder trees (labels are ids)
``plain``                None (read as stored)         compressed tar shards, local and
                                                       ``s3://`` (their decompressed copy
                                                       in the node cache)
``io_stats``             ``{}``                        array and table sources (how they
                                                       read)
``ranges``               False (read through           plain local tar shards (sample
                         ``read(i)`` alone)            ``i`` is bytes ``table.offsets[i]``
                                                       .. ``+ table.sizes[i]`` of ``file``:
                                                       read a chunk of samples natively,
                                                       :mod:`turbofeed.io.local.ranges`)
=======================  ============================  ====================================

Members: a WebDataset sample is every member sharing its key (``a.jpg``, ``a.txt``,
``a.seg.png``); ``ext`` is the rest of the name as :func:`~turbofeed.io.split_key`
gives it (``"jpg"``, ``"txt"``, ``"seg.png"``). A source whose ``table`` records no
members (``table.has_members`` False: image folders, HDF5, Zarr, .npy, Parquet) has one,
the image, whose extension is :meth:`SampleTable.image_ext`: that of its file name
(``"jpeg"`` for ``cat/1.JPEG``), or ``""`` for an array row (``images[3]``), whose
``read`` gives pixels or encoded bytes of a format its name does not tell.

Built-in sources subclass :class:`Source` to inherit these defaults; adding a source is
one such class plus one entry in :mod:`turbofeed.io.registry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .local.files import FileRef
from .table import SampleTable

if TYPE_CHECKING:
    from .local.compressed import PlainCopy


class Damage(Protocol):
    """Why a source is reported while indexing (cut short, corrupt, empty, duplicate names)."""

    reason: str

    def describe(self, path: str, samples: int) -> str:
        """One line naming ``path``, what is wrong and the ``samples`` still used."""
        ...


@runtime_checkable
class Source(Protocol):
    """A readable collection of samples: a tar shard, an image folder, an array file, an
    ``s3://`` shard.

    ``path`` names the source in messages; ``table`` lists its samples; ``read(i)``
    returns the encoded image bytes of sample ``i`` (an index into ``table``), or its
    uint8 pixels for the array formats (HDF5, Zarr, .npy), and must be safe to call
    from many threads at once; ``close()`` releases handles and may be called more
    than once. The other members are optional capabilities with defaults (see the
    module docstring).

    Attributes:
        damage: why the source was reported while indexing, or None. A damaged source
            keeps the samples before the damage (none when it is unreadable); the
            dataset lists it in ``IndexedDataset.damaged``.
        file: the local file as it was indexed (path and identity), or None.
        classes: class names when the labels in ``table`` are already ids into them
            (an ImageFolder's sorted folders); None when they are raw values (integers,
            class names, None) that the dataset numbers (:mod:`turbofeed.io.labels`).
        plain: a compressed shard's decompressed copy in the node cache, which its
            samples are read from (``table`` offsets are into it), or None.
        ranges: True when sample ``i``'s image is exactly the bytes ``table.offsets[i]``
            .. ``table.offsets[i] + table.sizes[i]`` of ``file`` (the hot path then reads a
            whole chunk of samples in one native call, without ``read``).
    """

    path: str
    table: SampleTable
    damage: Damage | None = None
    file: FileRef | None = None
    classes: list[str] | None = None
    plain: PlainCopy | None = None
    ranges: bool = False

    def read(self, i: int) -> bytes | np.ndarray: ...

    def close(self) -> None: ...

    def view(self, i: int) -> bytes | memoryview | np.ndarray:
        """Sample ``i`` like :meth:`read`, without a copy where the source can (valid as
        long as it is referenced). Default: :meth:`read`."""
        return self.read(i)

    def head(self, i: int, size: int) -> bytes | np.ndarray:
        """The first ``size`` bytes of sample ``i`` (its image's header: its size for
        aspect-ratio buckets, :mod:`turbofeed.io.sizes`); an array sample whole. Default:
        :meth:`read` cut (sources of files override it to read no more)."""
        data = self.read(i)
        return data if isinstance(data, np.ndarray) else data[:size]

    def read_member(self, i: int, ext: str) -> bytes | np.ndarray | None:
        """The member of sample ``i`` with extension ``ext`` (``"jpg"``, ``"txt"``,
        ``"seg.png"``), or None when the sample has none; thread-safe like :meth:`read`.
        Default: the image is the only member (``read(i)`` for its extension)."""
        return self.read(i) if ext == self.table.image_ext(i) else None

    def member_exts(self, i: int) -> tuple[str, ...]:
        """Extensions of sample ``i``'s members, in storage order. Default: the image's."""
        return (self.table.image_ext(i),)

    def changed(self) -> bool:
        """True when the data on disk is not the version indexed any more (replaced,
        rewritten, truncated, gone): the dataset then opens the source again. Default:
        ``file`` changed (never, without a ``file``)."""
        return self.file is not None and self.file.changed()

    def io_stats(self) -> dict[str, Any]:
        """How samples are read (``read_mode``, block loads and hits ...); default ``{}``."""
        return {}
