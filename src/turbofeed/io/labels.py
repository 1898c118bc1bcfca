"""From the raw labels of every source (integers, class names, None) to one int64 id per
sample, and the class names behind the ids.

==========================  ===========================================================
labels in the data          ids
==========================  ===========================================================
integers only (``.cls``)    the integers; no class names
class names (``.txt``,      ``classes.index(name)`` with ``classes=[...]``; without it
JSON strings, folders)      the position in the sorted names found, with a warning:
                            another split holding other names would number them
                            differently (train and val would disagree)
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
from .source import Source

log = logging.getLogger("turbofeed")


def label_ids(sources: Sequence[Source], classes: list[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """``(ids, class_names)`` for the samples of ``sources`` in order (see the table above).

    Raises:
        DatasetError: a name not in ``classes``, an integer outside ``range(len(classes))``,
            integers mixed with names without ``classes``, or ImageFolder roots whose class
            folders differ (each names the shard and sample, or the roots).
    """
    raw = [label for s in sources for label in s.table.labels]
    # sources whose labels are ids into their own class names already (ImageFolder trees)
    folders = [(s, s.classes) for s in sources if s.classes]
    others = [s for s in sources if s.classes is None]
    if classes is not None:
        ids = {name: i for i, name in enumerate(classes)}
        _check_known(sources, ids)
        return np.array([-1 if x is None else ids[x] if isinstance(x, str) else x for x in raw],
                        dtype=np.int64), list(classes)
    names = sorted({x for s in others for x in s.table.labels if isinstance(x, str)})
    numbers = any(isinstance(x, int) for s in others for x in s.table.labels)
    if folders:  # their labels are ids already: positions in their sorted folder names
        lists = {tuple(found) for _, found in folders}
        if len(lists) > 1:
            shown = "; ".join(f"{s.path}: {len(found)} classes" for s, found in folders[:3])
            raise DatasetError(f"ImageFolder roots with different class folders ({shown}) would give "
                               "one id to different classes; pass classes=[...] to fix the ids")
        if numbers or not set(names) <= set(folders[0][1]):
            _mixed(sources)
        names = list(folders[0][1])
    elif names and numbers:
        _mixed(sources)
    if not names:
        return np.array([-1 if x is None else x for x in raw], dtype=np.int64), None
    log.warning("turbofeed: class ids come from the %d class names found in this data, in sorted "
                "order (%s); a loader over other data (a validation split missing a class) would "
                "number them differently: pass classes=[...] (e.g. this loader's class_names) to fix "
                "them", len(names), ", ".join(names[:5]) + (" ..." if len(names) > 5 else ""))
    ids = {name: i for i, name in enumerate(names)}
    return np.array([-1 if x is None else ids[x] if isinstance(x, str) else x for x in raw],
                    dtype=np.int64), names


def _check_known(sources: Sequence[Source], ids: dict[str, int]) -> None:
    """Every name is in ``classes`` and every integer is one of its ids."""
    bad = []
    for s in sources:
        for key, label in zip(s.table.keys, s.table.labels):
            if isinstance(label, str) and label not in ids:
                bad.append(f"{label!r} ({s.path}/{key})")
            elif isinstance(label, int) and not 0 <= label < len(ids):
                bad.append(f"integer label {label} ({s.path}/{key})")
            if len(bad) == 5:
                break
    if bad:
        raise DatasetError(f"labels not among the {len(ids)} classes given: {', '.join(bad)}; "
                           "add them to classes=[...] or remove those samples")


def _mixed(sources: Sequence[Source]) -> None:
    number = name = None
    for s in sources:
        for key, label in zip(s.table.keys, s.table.labels):
            if isinstance(label, str) and name is None:
                name = f"{label!r} in {s.path}/{key}"
            elif isinstance(label, int) and number is None:
                number = f"{label} in {s.path}/{key}" if s.classes is None else \
                    f"class folders of {s.path}"
    raise DatasetError(f"the data mixes integer labels ({number}) and class names ({name}): a name's "
                       "sorted position could be another class's integer; pass classes=[...] to say "
                       "which id each name has")
