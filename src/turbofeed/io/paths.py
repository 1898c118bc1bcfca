"""What the user passed (path, list, brace pattern, glob, folder) as concrete local paths.

Which format each path holds, and ``s3://`` items, are the registry's
(:func:`turbofeed.io.registry.resolve`); this module only expands patterns and checks
that the paths exist.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Sequence
from typing import TypeVar, Union

from ..errors import DatasetError

PathSpec = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]
T = TypeVar("T")
#: The dataset index's file name (:mod:`turbofeed.io.dsindex`): never data, so patterns skip it.
INDEX_NAME = "turbofeed.index"

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def expand_braces(pattern: str) -> list[str]:
    """Expand WebDataset/bash brace patterns, left to right.

    ``shard-{000000..000002}.tar`` -> shard-000000.tar, shard-000001.tar, shard-000002.tar
    (zero padding follows the first bound); ``{train,val}`` -> train, val.
    """
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body = match.group(1)
    head, tail = pattern[:match.start()], pattern[match.end():]
    numeric = _RANGE.match(body)
    if numeric:
        lo, hi = int(numeric.group(1)), int(numeric.group(2))
        width = len(numeric.group(1)) if numeric.group(1).startswith("0") else 0
        step = 1 if hi >= lo else -1
        options = [str(v).zfill(width) for v in range(lo, hi + step, step)]
    elif "," in body:
        options = body.split(",")
    else:
        options = ["{" + body + "}"]  # not a pattern: keep literally
        return [head + options[0] + t for t in expand_braces(tail)]
    return [head + o + t for o in options for t in expand_braces(tail)]


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
