"""From the raw labels of every source (integers, class names, None) to one int64 id per
sample, and the class names behind the ids.

==========================  ===========================================================
labels in the data          ids
==========================  ===========================================================
integers only (``.cls``,    the integers; no class names
``.txt``, JSON)
class names (JSON strings,  ``classes.index(name)`` with ``classes=[...]``; without it
folders; ``.txt`` with      the position in the sorted names found, with a warning:
``classes`` or beside an    another split holding other names would number them
ImageFolder tree)           differently (train and val would disagree)
``.txt`` text that is not   ``-1`` without ``classes`` (and no ImageFolder tree): it is
an integer                  a caption (CLIP/LAION ``jpg`` + ``txt`` shards), not a
                            class; one warning shows the ``fields=`` line that loads it
integers and names mixed    an error unless ``classes`` is given (ids would collide)
none (or JSON metadata      ``-1``: the sample is delivered, never dropped for lacking
without a label field)      a label
==========================  ===========================================================
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..errors import DatasetError
from .columns import INT, NAME, NONE, LabelArrays, label_arrays
from .source import Source
from .table import IMAGE_EXTENSIONS

log = logging.getLogger("turbofeed")


def label_ids(sources: Sequence[Source], classes: list[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """``(ids, class_names)`` for the samples of ``sources`` in order (see the table above).

    Works on each table's labels as arrays (:func:`~turbofeed.io.columns.label_arrays`):
    tables read from the dataset index cost numpy work per shard, no Python per sample.

    Raises:
        DatasetError: a name not in ``classes``, an integer outside ``range(len(classes))``,
            integers mixed with names (or with an ImageFolder tree) without ``classes``,
            names beside an ImageFolder tree that its class folders lack, or ImageFolder
            roots whose class folders differ (each names the shard and sample, or the roots).
    """
    parts = [label_arrays(s.table.labels) for s in sources]
    # sources whose labels are ids into their own class names already (ImageFolder trees)
    folders = [(s, s.classes) for s in sources if s.classes]
    others = [p for s, p in zip(sources, parts) if s.classes is None]
    if classes is None and not folders:
        taken = [_captions_unlabelled(s, p) for s, p in zip(sources, parts)]
        parts = [p for p, _ in taken]
        _warn_captions([(s, p, rows) for s, (p, rows) in zip(sources, taken) if len(rows)])
        others = [p for s, p in zip(sources, parts) if s.classes is None]
    if classes is not None:
        ids = {name: i for i, name in enumerate(classes)}
        _check_known(sources, parts, ids)
        return _numbered(parts, ids), list(classes)
    found: set[str] = set()
    for p in others:
        found.update(_names_used(p))
    names = sorted(found)
    numbers = any(bool((p.kind == INT).any()) for p in others)
    if folders:  # their labels are ids already: positions in their sorted folder names
        lists = {tuple(folder) for _, folder in folders}
        if len(lists) > 1:
            shown = "; ".join(f"{s.path}: {len(folder)} classes" for s, folder in folders[:3])
            raise DatasetError(f"ImageFolder roots with different class folders ({shown}) would give "
                               "one id to different classes; pass classes=[...] to fix the ids")
        if numbers or not set(names) <= set(folders[0][1]):
            _mixed(sources, parts, set(folders[0][1]))
        names = list(folders[0][1])
    elif names and numbers:
        _mixed(sources, parts)
    if not names:
        return _numbered(parts, {}), None
    log.warning("turbofeed: class ids come from the %d class names found in this data, in sorted "
                "order (%s); a loader over other data (a validation split missing a class) would "
                "number them differently: pass classes=[...] (e.g. this loader's class_names) to fix "
                "them", len(names), ", ".join(names[:5]) + (" ..." if len(names) > 5 else ""))
    return _numbered(parts, {name: i for i, name in enumerate(names)}), names


def _captions_unlabelled(source: Source, p: LabelArrays) -> tuple[LabelArrays, np.ndarray]:
    """``p`` without the class names read from a ``.txt`` member, and the rows taken out:
    without ``classes`` a ``.txt`` is a label only when it holds an integer. A name came
    from the ``.txt`` when the sample has one (the label member is ``.cls``, else
    ``.txt``, else ``.json``, and a ``.cls`` is always an integer). Numpy work per table,
    no Python per sample; the table's own arrays (a memory-mapped index) are not changed."""
    named = p.kind == NAME
    table = source.table
    none = np.zeros(0, np.int64)
    if not named.any() or not table.has_members or "txt" not in table.member_exts:
        return p, none
    # the .txt members (positions may be the whole dataset index's: this table's are a slice)
    first, end = int(table.member_start[0]), int(table.member_start[-1])
    rows = first + np.flatnonzero(table.member_ext[first:end] == table.member_exts.index("txt"))
    has_txt = np.zeros(len(p.kind), bool)
    has_txt[np.searchsorted(table.member_start, rows, side="right") - 1] = True
    caption = np.flatnonzero(named & has_txt)
    if not len(caption):
        return p, none
    kind = p.kind.copy()
    kind[caption] = NONE  # an unlabelled sample
    return LabelArrays(kind, p.value, p.names), caption


def _warn_captions(found: list[tuple[Source, LabelArrays, np.ndarray]]) -> None:
    """One warning for the ``.txt`` texts taken as captions: how many, an example, and
    the ``fields=`` line that loads them."""
    if not found:
        return
    s, p, rows = found[0]
    row = int(rows[0])
    text = p.names[int(p.value[row])]
    exts = {e for src, _, _ in found for e in src.table.member_exts}
    images = ";".join(e for e in IMAGE_EXTENSIONS if e in exts) or "jpg;png;webp"
    meta = ', "meta": "json?"' if "json" in exts else ""
    log.warning("turbofeed: %d samples have a .txt member that is not an integer (e.g. %r in %s/%s): the data "
                "looks like captions, so these samples are unlabelled (label -1); to load the captions, ask "
                "for fields: turbofeed.Dataset(..., fields={\"image\": \"%s\", \"caption\": \"txt\"%s}); if "
                "they are class names, turbofeed.Dataset(..., classes=[...])", sum(len(r) for _, _, r in found),
                text[:60], s.path, s.table.keys[row], images, meta)


def _names_used(p: LabelArrays) -> list[str]:
    """The class names the labels of one table use (not every name of its name table)."""
    used = np.unique(p.value[p.kind == NAME])
    return [p.names[j] for j in used.tolist()]


class _Lookup:
    """Each name table's positions -> class ids (-1: not a class), made once per table:
    the shards of one dataset index share one name table."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids
        self._made: dict[int, tuple[Sequence[str], np.ndarray]] = {}

    def __call__(self, names: Sequence[str]) -> np.ndarray:
        hit = self._made.get(id(names))
        if hit is None or hit[0] is not names:
            hit = self._made[id(names)] = (names, np.array([self.ids.get(n, -1) for n in names], np.int64))
        return hit[1]


def _numbered(parts: Sequence[LabelArrays], ids: dict[str, int]) -> np.ndarray:
    """One int64 id per sample: integers as they are, names by ``ids``, no label -1
    (written in place: no per-table temporaries the size of the dataset)."""
    lookup = _Lookup(ids)
    out = np.full(sum(len(p.kind) for p in parts), -1, np.int64)
    at = 0
    for p in parts:
        here = out[at:at + len(p.kind)]
        at += len(p.kind)
        ints = p.kind == INT
        np.copyto(here, p.value, where=ints, casting="unsafe")
        named = p.kind == NAME
        if named.any():
            here[named] = lookup(p.names)[p.value[named]]
    return out


def _check_known(sources: Sequence[Source], parts: Sequence[LabelArrays], ids: dict[str, int]) -> None:
    """Every name is in ``classes`` and every integer is one of its ids."""
    lookup = _Lookup(ids)
    bad: list[str] = []
    for s, p in zip(sources, parts):
        unknown = p.kind == NAME
        if unknown.any():
            unknown[unknown] = lookup(p.names)[p.value[unknown]] < 0
        outside = (p.kind == INT) & ((p.value < 0) | (p.value >= len(ids)))
        for i in np.flatnonzero(unknown | outside)[:5 - len(bad)].tolist():
            key = s.table.keys[i]
            if p.kind[i] == NAME:
                bad.append(f"{p.names[int(p.value[i])]!r} ({s.path}/{key})")
            else:
                bad.append(f"integer label {int(p.value[i])} ({s.path}/{key})")
        if len(bad) == 5:
            break
    if bad:
        raise DatasetError(f"labels not among the {len(ids)} classes given: {', '.join(bad)}; "
                           "add them to classes=[...] or remove those samples")


def _mixed(sources: Sequence[Source], parts: Sequence[LabelArrays],
           folder_classes: set[str] | None = None) -> None:
    """Raise for labels that cannot share one numbering without ``classes``: integers
    beside class names (an ImageFolder tree's labels are its class folders' names), or
    names the tree's class folders lack. Names the first such sample of each role."""
    number = name = folder = None
    for s, p in zip(sources, parts):
        if s.classes:
            folder = folder or f"class folders of {s.path}"
            continue
        named = np.flatnonzero(p.kind == NAME)
        if folder_classes is not None:  # only the names the tree does not have
            lacking = np.array([n not in folder_classes for n in p.names], dtype=bool)
            named = named[lacking[p.value[named]]]
        if name is None and len(named):
            i = int(named[0])
            name = f"{p.names[int(p.value[i])]!r} in {s.path}/{s.table.keys[i]}"
        if number is None and (p.kind == INT).any():
            i = int(np.flatnonzero(p.kind == INT)[0])
            number = f"{int(p.value[i])} in {s.path}/{s.table.keys[i]}"
    if number is None:
        raise DatasetError(f"class names ({name}) are not among the {folder}: pass classes=[...] to say "
                           "which id each name has")
    raise DatasetError(f"the data mixes integer labels ({number}) and class names ({name or folder}): a "
                       "name's sorted position could be another class's integer; pass classes=[...] to say "
                       "which id each name has")
