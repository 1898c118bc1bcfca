"""Turn what the user passed (path, list, brace pattern, glob, folder) into concrete sources."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from ..errors import DatasetError
from .formats import EXTENSIONS, check_format, classify_file, expand_dir

if TYPE_CHECKING:
    from .s3client import S3Config

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


def resolve(spec: PathSpec, format: str | None = None, *,
            s3: S3Config | None = None) -> list[tuple[str, str]]:
    """Return ``[(kind, path)]`` with kind ``"tar"``, ``"folder"`` or an array/table format
    (``"hdf5"``, ``"zarr"``, ``"npy"``, ``"parquet"``: see :mod:`turbofeed.io.formats`), in a
    stable order. ``format`` says what every path is instead of its extension.
    ``s3://`` items give kind ``"s3"`` (tar shard URLs, see
    :func:`turbofeed.io.s3.resolve_urls`), reached with ``s3`` (an
    :class:`~turbofeed.io.s3client.S3Config`; default: the process default and the AWS
    variables and profile).

    Raises:
        DatasetError: a path is missing, a pattern matches nothing, a file is not a
            tar shard, an S3 object is missing, or nothing was given at all.
    """
    check_format(format)
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if not items:
        raise DatasetError("no dataset paths given (an empty list)")
    out: list[tuple[str, str]] = []
    for item in items:
        text = os.fspath(item)
        if text.startswith("s3://"):
            if format == "zarr" or (format is None and text.rstrip("/").endswith(".zarr")):
                out.append(("zarr", text.rstrip("/")))  # a Zarr store: read through zarr
                continue
            if format not in (None, "tar"):
                raise DatasetError(f"{text}: s3:// datasets are WebDataset .tar shards, not {format}")
            from .s3 import resolve_urls

            out.extend(("s3", url) for url in resolve_urls(text, s3))
            continue
        paths = expand_braces(os.path.expanduser(text))
        missing = []
        for path in paths:
            if glob.has_magic(path):
                hits = sorted(glob.glob(path))
                if not hits:
                    raise DatasetError(f"{path}: pattern matches no files")
                for hit in hits:
                    out.extend(_expand_dir(hit, format) if os.path.isdir(hit) else [_classify(hit, format)])
            elif os.path.exists(path):
                out.extend(_expand_dir(path, format) if os.path.isdir(path) else [_classify(path, format)])
            else:
                missing.append(path)
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise DatasetError(f"no such file or directory: {shown}"
                               + (f" (from pattern {text})" if len(paths) > 1 else ""))
    return out


def _expand_dir(path: str, format: str | None = None) -> list[tuple[str, str]]:
    """A directory of tar shards (plain or compressed: every one of them, zero-byte ones
    included, so none is left out without a word) is a shard list; a Zarr store or a folder
    of array/table files is those (:func:`turbofeed.io.formats.expand_dir`); any other is
    an ImageFolder."""
    found = expand_dir(path, format)
    if found is not None:
        return found
    tars = sorted(e.path for e in os.scandir(path) if e.is_file() and e.name.endswith(EXTENSIONS["tar"]))
    return [("tar", t) for t in tars] if tars else [("folder", path)]


def _classify(path: str, format: str | None = None) -> tuple[str, str]:
    found = classify_file(path, format)
    if found is not None:
        return found
    if path.endswith(EXTENSIONS["tar"]):
        return "tar", path
    raise DatasetError(f"{path}: not a .tar shard (or .tar.gz, .tgz, .tar.bz2, .tar.xz), a folder or a "
                       "known array/table file (.h5, .zarr, .npy, .parquet); pass format=... to say what it is")
