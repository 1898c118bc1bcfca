"""WebDataset grouping of a shard's members into samples, on arrays: what
:func:`turbofeed.io.table.group_members`, ``pick_image`` and ``pick_label_member`` give,
member for member, without a Python loop per sample.

The rules, as there: a member's key is its name up to the first dot after the last
slash, its extension the rest, lower-cased (:func:`~turbofeed.io.table.split_key`, on
the raw names: :attr:`~turbofeed.io.local.members.MemberArrays.split`). Samples
are the keys in order of first appearance; a sample's members are the first member of
each extension, in storage order; its image the member of the first of
``IMAGE_EXTENSIONS`` it has, its label member the first of ``LABEL_EXTENSIONS``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..local.members import MemberArrays
from ..table import IMAGE_EXTENSIONS, LABEL_EXTENSIONS


@dataclass
class Samples:
    """The samples of a shard's members.

    Attributes:
        key_blob: the samples' keys (raw bytes) one after another, in sample order.
        key_len: each sample's key's length.
        rows: the members of every sample (indexes into the members), sample after
            sample; ``count[i]`` of them for sample ``i``.
        count: members per sample.
        ext: per row, its extension's position in ``exts``.
        exts: the lower-cased extensions, in order of first appearance in ``rows``.
        image: per sample, its image member (-1: none).
        label: per sample, its label member (-1: none).
        lext: per member (not row), its lower-cased extension's position in ``lower``.
        lower: the distinct lower-cased extensions.
        raw_id: per member, its extension as written (not lower-cased): a position in ``raw``.
        raw: the distinct extensions as written, decoded.
    """

    key_blob: bytes
    key_len: np.ndarray
    rows: np.ndarray
    count: np.ndarray
    ext: np.ndarray
    exts: dict[str, int]
    image: np.ndarray
    label: np.ndarray
    lext: np.ndarray
    lower: list[str]
    raw_id: np.ndarray
    raw: list[str]


def _first_of(preferred: tuple[str, ...], exts: list[str], ext: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per sample (``count`` rows each, ``ext`` per row: positions in ``exts``), the row
    of the first of ``preferred`` it has, or -1."""
    rank = np.array([preferred.index(e) if e in preferred else len(preferred) for e in exts] or [0], np.int64)
    n = len(ext)
    if n == 0:
        return np.zeros(0, np.int64)
    best = np.minimum.reduceat(rank[ext] * n + np.arange(n, dtype=np.int64), np.cumsum(count) - count)
    return np.where(best // n < len(preferred), best % n, -1)


def group(m: MemberArrays) -> Samples:
    """The samples of the members ``m`` (see the module docstring)."""
    split = m.split
    key_id, raw_id = split.key_id, split.raw_id
    raw = [r.decode("utf-8", "surrogateescape") for r in split.raw]
    lower_ids: dict[str, int] = {}
    lowered = np.array([lower_ids.setdefault(r.lower(), len(lower_ids)) for r in raw] or [0], np.int64)
    lext = lowered[raw_id]
    lower_names = list(lower_ids)
    # the first member of each (key, extension), samples in key order, members in storage order
    pair = key_id * max(1, len(lower_names)) + lext
    _, first = np.unique(pair, return_index=True)
    rows = first[np.lexsort((first, key_id[first]))]
    count = np.bincount(key_id[rows], minlength=len(split.key_first)).astype(np.int64)
    row_ext = lext[rows]
    used, seen = np.unique(row_ext, return_index=True)
    order = used[np.argsort(seen, kind="stable")]
    renumber = np.zeros(max(1, len(lower_names)), np.int64)
    renumber[order] = np.arange(len(order))
    exts = {lower_names[int(u)]: i for i, u in enumerate(order)}
    image = _first_of(IMAGE_EXTENSIONS, lower_names, row_ext, count)
    label = _first_of(LABEL_EXTENSIONS, lower_names, row_ext, count)
    return Samples(key_blob=m.key_blob(split.key_first), key_len=split.key_len[split.key_first], rows=rows,
                   count=count, ext=renumber[row_ext], exts=exts,
                   image=np.where(image >= 0, rows[image], -1), label=np.where(label >= 0, rows[label], -1),
                   lext=lext, lower=lower_names, raw_id=raw_id, raw=raw)
