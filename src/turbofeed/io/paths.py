"""Turn what the user passed (path, list, brace pattern, glob, folder) into concrete sources."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import Union

from ..errors import DatasetError

PathSpec = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

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


def resolve(spec: PathSpec) -> list[tuple[str, str]]:
    """Return ``[(kind, path)]`` with kind ``"tar"`` or ``"folder"``, in a stable order.

    Raises:
        DatasetError: a path is missing, a pattern matches nothing, a file is not a
            tar shard, an S3 URL was given, or nothing was given at all.
    """
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if not items:
        raise DatasetError("no dataset paths given (an empty list)")
    out: list[tuple[str, str]] = []
    for item in items:
        text = os.fspath(item)
        if text.startswith("s3://"):
            raise DatasetError(f"{text}: s3:// datasets are not supported yet; copy the shards "
                               "locally (e.g. `aws s3 sync`) and pass the local path")
        paths = expand_braces(os.path.expanduser(text))
        missing = []
        for path in paths:
            if glob.has_magic(path):
                hits = sorted(glob.glob(path))
                if not hits:
                    raise DatasetError(f"{path}: pattern matches no files")
                for hit in hits:
                    out.extend(_expand_dir(hit) if os.path.isdir(hit) else [_classify(hit)])
            elif os.path.exists(path):
                out.extend(_expand_dir(path) if os.path.isdir(path) else [_classify(path)])
            else:
                missing.append(path)
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise DatasetError(f"no such file or directory: {shown}"
                               + (f" (from pattern {text})" if len(paths) > 1 else ""))
    return out


def _expand_dir(path: str) -> list[tuple[str, str]]:
    """A directory of .tar shards is a shard list; any other directory is an ImageFolder."""
    tars = sorted(e.path for e in os.scandir(path) if e.is_file() and e.name.endswith(".tar"))
    return [("tar", t) for t in tars] if tars else [("folder", path)]


def _classify(path: str) -> tuple[str, str]:
    if path.endswith(".tar"):
        return "tar", path
    if path.endswith((".tar.gz", ".tgz")):
        raise DatasetError(f"{path}: compressed tar; turbofeed reads plain .tar shards "
                           "(decompress once with `gunzip`) for random access")
    raise DatasetError(f"{path}: not a .tar shard or a folder")
