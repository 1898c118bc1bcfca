"""What the user passed (path, list, brace pattern, glob, folder) as concrete local paths.

Which format each path holds, and ``s3://`` items, are the registry's
(:func:`turbofeed.io.registry.resolve`); this module only expands patterns and checks
that the paths exist.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from typing import TypeVar, Union

from braceexpand import braceexpand

from ..errors import DatasetError

#: A path, or a list whose entries are paths or lists of paths (one dataset's each, as
#: ``DataLoader([[a1, a2], b], weights=[...])`` and :func:`turbofeed.mix` give).
PathSpec = Union[str, os.PathLike, Sequence[Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]]]
T = TypeVar("T")
#: The dataset index's file name (:mod:`turbofeed.io.dsindex`): never data, so patterns skip it.
INDEX_NAME = "turbofeed.index"

def flat_paths(spec: PathSpec) -> list[str | os.PathLike]:
    """The paths of ``spec`` in order, a nested list's entries flattened (one level)."""
    if isinstance(spec, (str, os.PathLike)):
        return [spec]
    out: list[str | os.PathLike] = []
    for item in spec:
        out.extend([item] if isinstance(item, (str, os.PathLike)) else item)
    return out


def expand_braces(pattern: str) -> list[str]:
    """Expand WebDataset/bash brace patterns with the ``braceexpand`` library (as
    WebDataset does), left to right.

    ``shard-{000000..000002}.tar`` -> shard-000000.tar, shard-000001.tar, shard-000002.tar
    (zero padding follows the bounds); ``{train,val}`` -> train, val; stepped
    ``{0..6..2}`` -> 0, 2, 4, 6; letters ``{a..c}``; nested ``x{a,{b,c}}`` -> xa, xb, xc.
    Braces that are no pattern (``odd{name}``, ``{}``, one left open) stay as written;
    backslashes are part of the path, not escapes.
    """
    try:
        return list(braceexpand(pattern, escape=False))
    except ValueError:  # its UnbalancedBracesError (a ValueError; the library's stub does not declare it)
        return [pattern]  # not a pattern: a path that holds a brace (missing ones are named later)


def expand_local(text: str, classify: Callable[[str], list[T]]) -> list[T]:
    """``classify(path)`` of every path ``text`` names (``~``, braces, globs), in a stable
    order: glob hits sorted, the rest as written.

    Raises:
        DatasetError: a pattern matches nothing, or paths are missing (named, up to three).
    """
    paths = expand_braces(os.path.expanduser(text))
    out: list[T] = []
    missing = []
    for path in paths:
        if glob.has_magic(path):
            hits = sorted(h for h in glob.glob(path) if os.path.basename(h) != INDEX_NAME)
            if not hits:
                raise DatasetError(f"{path}: pattern matches no files")
            for hit in hits:
                out.extend(classify(hit))
        elif os.path.exists(path):
            out.extend(classify(path))
        else:
            missing.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DatasetError(f"no such file or directory: {shown}"
                           + (f" (from pattern {text})" if len(paths) > 1 else ""))
    return out
