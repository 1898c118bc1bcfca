"""The dataset index a loader uses: the one next to the data, else the index cache's
(:mod:`turbofeed.io.dsindex.where`); for local shards, one built now when neither
describes them all as they are (:mod:`turbofeed.io.dsindex.auto`); for ``s3://`` shards
without one, none (then a hint, once, on ``turbofeed index``)."""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...base.renamed import accepts_renamed
from ...errors import DatasetError
from ..local.private import trusted
from ..paths import PathSpec
from ..retry import RemoteError
from ..stores.families import is_remote
from ..stores.urls import shared_client
from .auto import auto_index, file_identity
from .fileformat import REBUILD
from .load import DatasetIndex
from .where import beside, cached_path, describe, s3_copy

if TYPE_CHECKING:
    from ..stores.config import S3Config

log = logging.getLogger("turbofeed")

_HINTED: set[str] = set()


@accepts_renamed
def open_index(where: str, *, cache_dir: str | None = None, storage: S3Config | None = None,
               ask: bool = True, cached: bool = False) -> DatasetIndex | None:
    """The index at ``where`` (a local file, or an ``s3://`` object read through its local
    copy), or None when there is none. ``ask=False``: an ``s3://`` object the dataset's
    listing did not show is taken to be absent (no request). ``cached``: ``where`` is in
    the index cache, so it is used only if the user alone could have written it
    (:mod:`turbofeed.io.local.private`; else None, with a warning); so is an ``s3://``
    index's local copy.

    Raises:
        DatasetError: it exists but is no index this turbofeed reads, is damaged, or
            cannot be read.
    """
    origin = where
    if is_remote(where):
        try:
            local = s3_copy(where, shared_client(storage), cache_dir, ask=ask)
        except RemoteError as exc:
            raise DatasetError(f"{where}: cannot read the dataset index: {exc}") from exc
        if local is None:
            return None
        where, cached = local, True
    elif not os.path.isfile(where):
        return None
    if cached and not trusted(where, "the dataset index"):
        return None
    try:
        try:
            return DatasetIndex(where, origin=origin)
        except (KeyError, TypeError, ValueError) as exc:  # a header written wrong: refused whole
            raise DatasetError(f"{where}: damaged dataset index (a malformed header: {exc!r}): rebuild it "
                               "with `turbofeed index`") from exc
    except DatasetError:
        if where != origin:  # the cache's copy of an s3:// index, damaged: the next start downloads it again
            try:
                os.unlink(where)
            except OSError:
                pass
        raise
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read the dataset index: {exc}") from exc


@accepts_renamed
def find_index(spec: PathSpec, located: Sequence[tuple[str, str]], *, index: str | None = None,
               cache_dir: str | None = None, storage: S3Config | None = None, build: bool = True,
               progress: bool | None = None) -> DatasetIndex | None:
    """The dataset index for the shards of ``located`` (what ``spec`` resolved to).

    With ``index`` (a path or URL), that one, which must exist. Otherwise the first of the
    places a loader looks (next to the data, then the index cache) whose index lists every
    shard (a local one as it is now). When none does: for local shards (and ``build``),
    an index built now, reusing what the best one found holds, and written for the next
    loaders (:func:`~turbofeed.io.dsindex.auto.auto_index`); for ``s3://`` shards, the
    one listing the most of them (the others are then indexed one by one), with a hint
    at INFO, once, on ``turbofeed index``. An index that is damaged, of another format
    version or cannot be read (``index`` too), or one in the cache that others could have
    written, is not used: one warning names it and says why.

    Raises:
        DatasetError: ``index`` names no index (no such file or object), or one that
            cannot be read; a local shard cannot be read to index it.
    """
    shards = [(kind, path) for kind, path in located if kind in ("tar", "s3")]
    if not shards:
        return None
    if index is not None:
        try:
            found = open_index(os.fspath(index), cache_dir=cache_dir, storage=storage)
        except DatasetError as exc:
            if isinstance(exc.__cause__, (RemoteError, OSError)):
                raise  # named but unreadable (an outage, no permission): said, not worked around
            log.warning("turbofeed: %s; indexing the shards one by one", exc)
            return None
        if found is None:
            raise DatasetError(f"no dataset index at {index}")
        return found
    remote = any(kind == "s3" for kind, _ in shards)
    auto = build and not remote
    best, most = None, 0
    mine = cached_path(shards, cache_dir)
    seen: dict[str, tuple | None] = {}  # each local file's identity when looked at
    for where in beside(shards) + [mine]:
        if not is_remote(where):
            seen[where] = file_identity(where)
        try:
            found = open_index(where, cache_dir=cache_dir, storage=storage, ask=False, cached=where == mine)
        except DatasetError as exc:
            if auto:  # no step for the user to take: it is rebuilt now
                log.warning("turbofeed: %s; building it again", str(exc).replace(REBUILD, ""))
            else:
                log.warning("turbofeed: %s; indexing the shards one by one", exc)
            continue
        covered = 0 if found is None else found.covers(shards)
        if found is not None and covered == len(shards) and not (auto and found.stale(shards)):
            return found
        if covered > most:
            best, most = found, covered
    if auto:
        return auto_index(spec, shards, best, seen, cache_dir=cache_dir, progress=progress)
    if best is None and remote:
        _hint(spec, shards)
    return best


def _hint(spec: PathSpec, shards: Sequence[tuple[str, str]]) -> None:
    what = describe(spec)
    if what in _HINTED:
        return
    _HINTED.add(what)
    log.info("turbofeed: no dataset index for %s (%d shards): each shard is downloaded and indexed on its "
             "own; `turbofeed index %s` writes one index, and loaders then start with one small read",
             what, len(shards), shlex.quote(what))
