"""Columns of a :class:`~turbofeed.io.SampleTable` backed by numpy arrays: sample keys,
image names and raw labels of a shard read from the dataset index
(:mod:`turbofeed.io.dsindex`), without one Python object per sample.

Each is a read-only sequence: ``col[i]``, ``len(col)``, iteration and slices give what
the list of a per-shard index would hold, so code written for lists works unchanged.
The arrays are usually views of the memory-mapped index, shared by every process of a
node; nothing is copied until an element is asked for.

:func:`label_arrays` turns any table's labels (a list or a :class:`LabelColumn`) into
``(kind, value, names)`` arrays, the form :mod:`turbofeed.io.labels` numbers them in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from .table import Label

#: ``kind`` of a raw label: none (or JSON metadata without a label), an integer, a class
#: name (``value`` is its position in ``names``), or a label that could not be parsed
#: (a sample the table leaves out when it parses labels).
NONE, INT, NAME, BAD = 0, 1, 2, 3


class _Column(Sequence):
    """What the columns share: bounds, negative indices, slices, list equality."""

    _n: int

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} samples")
        return self._at(i)

    def _at(self, i: int) -> Any:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, tuple, _Column)):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like a list

    def __repr__(self) -> str:
        shown = ", ".join(repr(x) for x in self[:3])
        return f"{type(self).__name__}([{shown}{', ...' if self._n > 3 else ''}], n={self._n})"


class StrColumn(_Column):
    """Strings stored end to end in ``blob`` (UTF-8, undecodable bytes kept as tar names
    keep them): string ``i`` is ``blob[start_i:ends[i]]`` with ``start_0 = first`` and
    ``start_i = ends[i - 1]``.

    Args:
        blob: uint8 array of every string's bytes (the whole index's: ``ends`` holds
            absolute positions in it).
        ends: unsigned array, the end of each string.
        first: where string 0 starts.
    """

    __slots__ = ("_blob", "_ends", "_first", "_n")

    def __init__(self, blob: np.ndarray, ends: np.ndarray, first: int = 0) -> None:
        self._blob = blob.data  # a memoryview: slicing and decoding it costs no numpy call
        self._ends = ends
        self._first = int(first)
        self._n = len(ends)

    def _at(self, i: int) -> str:
        start = self._first if i == 0 else int(self._ends[i - 1])
        return str(self._blob[start:int(self._ends[i])], "utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        blob, start = self._blob, self._first
        for end in self._ends.tolist():
            yield str(blob[start:end], "utf-8", "surrogateescape")
            start = end

    def encoded(self) -> tuple[np.ndarray, memoryview]:
        """``(lengths, bytes)``: the byte length of every string (int64) and their bytes end
        to end, as :func:`turbofeed.io.fingerprint.encoded_strings` gives for a list."""
        ends = np.asarray(self._ends, dtype=np.int64)
        if not self._n:
            return ends, self._blob[0:0]
        return np.diff(ends, prepend=self._first), self._blob[self._first:int(ends[-1])]


class JoinedColumn(_Column):
    """``keys[i] + "." + suffixes[ids[i]]``: image member names from their keys and the
    table of suffixes as the names spell them (``"jpg"``, ``"JPEG"``, ``"seg.png"``); the
    empty suffix gives ``""`` (a sample without an image member)."""

    __slots__ = ("_keys", "_ids", "_suffixes", "_n")

    def __init__(self, keys: StrColumn, ids: np.ndarray, suffixes: Sequence[str]) -> None:
        self._keys = keys
        self._ids = ids
        self._suffixes = list(suffixes)
        self._n = len(keys)

    def _at(self, i: int) -> str:
        suffix = self._suffixes[int(self._ids[i])]
        return f"{self._keys._at(i)}.{suffix}" if suffix else ""

    def __iter__(self) -> Iterator[str]:
        suffixes = self._suffixes
        for key, j in zip(self._keys, self._ids.tolist()):
            yield f"{key}.{suffixes[j]}" if suffixes[j] else ""


class LabelColumn(_Column):
    """Raw labels as ``(kind, value)`` arrays: ``int(value[i])`` for ``INT``,
    ``names[value[i]]`` for ``NAME``, None otherwise; ``kind=None``: every label is None
    (a table that parses no labels)."""

    __slots__ = ("kind", "value", "names", "_n")

    def __init__(self, kind: np.ndarray | None, value: np.ndarray | None, names: Sequence[str],
                 n: int | None = None) -> None:
        self.kind = kind
        self.value = value
        self.names = names
        self._n = len(kind) if kind is not None else int(n or 0)

    def _at(self, i: int) -> Label:
        if self.kind is None or self.value is None:
            return None
        k = self.kind[i]
        if k == INT:
            return int(self.value[i])
        if k == NAME:
            return self.names[int(self.value[i])]
        return None


class LabelArrays(NamedTuple):
    """A table's raw labels as arrays: ``kind`` (uint8, see :data:`NONE`...), ``value``
    (integers: the label, or the position of the class name in ``names``), ``names``."""

    kind: np.ndarray
    value: np.ndarray
    names: Sequence[str]


def label_arrays(labels: Sequence[Label]) -> LabelArrays:
    """``labels`` (a list of ints, class names and None, or a :class:`LabelColumn`) as
    :class:`LabelArrays`; a column's arrays are used as they are (no Python loop)."""
    if isinstance(labels, LabelColumn):
        n = len(labels)
        if labels.kind is None or labels.value is None:
            return LabelArrays(np.zeros(n, np.uint8), np.zeros(n, np.int64), [])
        return LabelArrays(labels.kind, labels.value, labels.names)  # views: no copy
    ids: dict[str, int] = {}
    kind = np.zeros(len(labels), np.uint8)
    value = np.zeros(len(labels), np.int64)
    for i, x in enumerate(labels):
        if isinstance(x, str):
            kind[i], value[i] = NAME, ids.setdefault(x, len(ids))
        elif x is not None:
            kind[i], value[i] = INT, x
    return LabelArrays(kind, value, list(ids))
