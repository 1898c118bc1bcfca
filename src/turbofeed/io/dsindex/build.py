"""``turbofeed index DATA``: every shard's part read in parallel, joined, written once.

Local shards are read where they are (headers, label members, and each JPEG's bytes: its
scan checked, :mod:`.parts`); ``s3://`` shards are downloaded one at a time per thread
into a private temporary file, indexed and removed. Compressed shards and empty objects are listed without their samples (loaders
open those on their own, as without the index).
"""

from __future__ import annotations

import datetime
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._deps import tqdm

from ...base.executor import Executor, result_or_closed
from ...base.renamed import accepts_renamed
from ...errors import DatasetError
from ..local.index import default_cache_dir
from ..local.members import scan_arrays
from ..local.private import private_dirs
from ..paths import INDEX_NAME, PathSpec
from ..registry import resolve
from ..retry import RemoteError
from ..stores.families import is_remote
from ..stores.client import S3Client
from ..stores.config import ObjectInfo
from ..stores.copies import temporary_copy
from ..stores.urls import COMPRESSED, shared_client, stat
from .fileformat import remove_temporaries, write_index
from .lock import build_lock
from .load import shard_id
from .parts import ShardPart, join, local_part, shard_part, unindexed_part
from .where import cached_path, default_target, describe, index_cache, s3_copy_path

if TYPE_CHECKING:
    from ..stores.config import S3Config

log = logging.getLogger("turbofeed")


@dataclass
class IndexSummary:
    """What :func:`build_index` wrote.

    Attributes:
        path: the index file or ``s3://`` object.
        shards: shards listed; ``unindexed`` of them without their samples (compressed).
        samples: samples indexed (before labels are parsed: a sample whose label cannot
            be parsed is counted, and left out by loaders that parse labels).
        bytes: the index's size.
        seconds: how long building and writing took.
        note: why the index is not where it was asked for (a failed upload), or "".
    """

    path: str
    shards: int
    samples: int
    bytes: int
    seconds: float
    unindexed: int = 0
    note: str = ""

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / max(1, self.samples)


@accepts_renamed
def build_index(data: PathSpec, *, out: str | None = None, cache_dir: str | None = None,
                storage: S3Config | None = None, threads: int | None = None,
                progress: bool | None = None) -> IndexSummary:
    """Index every shard of ``data`` and write the dataset index.

    Args:
        data: a folder, pattern, list or ``s3://`` prefix of tar shards (what loaders take).
        out: where to write it (a file or ``s3://`` URL; a folder gets ``turbofeed.index``
            inside); default: next to the data, or the index cache (see
            :mod:`turbofeed.io.dsindex.where`).
        cache_dir: turbofeed's cache folder (default ``$TURBOFEED_CACHE_DIR`` or
            ``~/.cache/turbofeed``).
        storage: endpoint and credentials for ``s3://`` (``gs://``, ``az://``, ``https://``)
            data, an :class:`~turbofeed.io.S3Config` (default: the process default);
            ``s3=``, its old name, is accepted for one release.
        threads: shards indexed at once (default :func:`default_threads`).
        progress: show a progress bar (None: when stderr is a terminal).

    Raises:
        DatasetError: the data is not tar shards, or a shard cannot be read.
    """
    started = time.perf_counter()
    located = resolve(data, storage=storage)
    others = [(kind, path) for kind, path in located if kind not in ("tar", "s3")]
    if others:
        raise DatasetError(f"{others[0][1]}: the dataset index describes tar shards (local or s3://), "
                           f"not {others[0][0]} data")
    client = shared_client(storage) if any(kind == "s3" for kind, _ in located) else None
    infos = {path: stat(path, client) for kind, path in located if kind == "s3" and client is not None}
    parts = read_parts(located, infos=infos, client=client, cache_dir=cache_dir, threads=threads,
                       progress=progress)
    fields, arrays = join(parts)
    target = os.fspath(out) if out is not None else default_target(data, located, cache_dir)
    if not is_remote(target) and os.path.isdir(target):
        target = os.path.join(target, INDEX_NAME)

    def header(where: str) -> dict:
        return index_header(describe(data), located, parts, fields, arrays, where, explicit_out=out is not None)
    note = ""
    if is_remote(target):
        try:
            size = _upload(target, header(target), arrays, shared_client(storage), cache_dir)
        except (RemoteError, OSError) as exc:
            note = f"could not write {target} ({exc}); wrote the index cache's copy instead"
            log.warning("turbofeed: %s", note)
            target = cached_path(located, cache_dir)
    if not is_remote(target):
        if os.path.abspath(target).startswith(os.path.abspath(index_cache(cache_dir)) + os.sep):
            private_dirs(os.path.dirname(target))  # the cache's folders: 0700
        else:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        with build_lock(target) as held:  # loaders starting now wait, then map this one
            if held:
                remove_temporaries(target)
            size = write_index(target, header(target), arrays)
    return IndexSummary(target, len(parts), int(len(arrays["key_end"])), size, time.perf_counter() - started,
                        unindexed=sum(bool(p.entry.get("per_shard")) for p in parts), note=note)


#: Remote shards indexed at once by default (each a temporary copy on the local disk).
REMOTE_THREADS = 8


def default_threads() -> int:
    """Shards indexed at once by default: every core this process may use (each JPEG's
    scan is checked while indexing, native work without the GIL, about 1 ms an image),
    at least 8 (reads of shards on network storage overlap), at most 64. Datasets with
    remote shards take :data:`REMOTE_THREADS` (the scratch disk holds one copy each)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(8, min(64, cores))


def read_parts(located: Sequence[tuple[str, str]], *, infos: dict[str, ObjectInfo] | None = None,
               client: S3Client | None = None, cache_dir: str | None = None, threads: int | None = None,
               progress: bool | None = None, known: dict[int, ShardPart] | None = None) -> list[ShardPart]:
    """Every shard's part, in order: those of ``known`` (positions -> part) as given, the
    others read ``threads`` at a time, with a progress bar when ``progress`` (None: when
    stderr is a terminal).

    Raises:
        DatasetError: a shard cannot be read.
    """
    known = known or {}
    todo = [k for k in range(len(located)) if k not in known]
    infos = infos or {}
    scratch = os.path.join(cache_dir or default_cache_dir(), "dataset-indexing")
    if threads is None:  # remote shards are each downloaded whole to scratch: as many at once as before
        threads = default_threads() if all(kind == "tar" for kind, _ in located) else REMOTE_THREADS
    pool = Executor(max(1, min(threads, len(todo))), "index")
    try:
        futures = [pool.submit(_part, *located[k], infos.get(located[k][1]), client, scratch) for k in todo]
        read = [result_or_closed(f) for f in tqdm(futures, desc="turbofeed: index", unit="shard",
                                                  disable=None if progress is None else not progress)]
    finally:
        pool.close()
    parts = dict(known)
    parts.update(zip(todo, read))
    return [parts[k] for k in range(len(located))]


def index_header(data: str, located: Sequence[tuple[str, str]], parts: Sequence[ShardPart], fields: dict,
                 arrays: dict, where: str, *, explicit_out: bool = False) -> dict:
    """The header of the index of ``parts`` (the shards of ``located``, ``data`` as a
    command line names them) written at ``where`` (shard names relative to its folder)."""
    shards = [{"name": name, **p.entry} for name, p in zip(_names(located, where), parts)]
    return {"data": data, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "samples": int(len(arrays["key_end"])), "members": int(len(arrays["member_ext"])),
            "explicit_out": explicit_out, "shards": shards, **fields}


def _part(kind: str, path: str, info: ObjectInfo | None, client: S3Client | None, scratch: str) -> ShardPart:
    """One shard's part (see the module docstring)."""
    if kind == "tar":
        try:
            return local_part(path)
        except OSError as exc:
            raise DatasetError(f"{path}: cannot index: {exc}") from exc
    assert info is not None and client is not None
    if path.endswith(COMPRESSED) or info.size == 0:
        return unindexed_part(etag=info.version, size=info.size)
    try:
        with temporary_copy(client, info, scratch) as (fd, _), os.fdopen(os.dup(fd), "rb") as f:
            members, damage = scan_arrays(f, info.size)
            part = shard_part(members, damage, f.fileno())
    except (RemoteError, OSError) as exc:
        raise DatasetError(f"{path}: cannot index: {exc}") from exc
    part.entry.update(etag=info.version, size=info.size)
    return part


def _names(located: Sequence[tuple[str, str]], target: str) -> list[str]:
    """Each shard's name in the index at ``target``: relative to its folder when the shard
    lies under it (the data and its index can move together), else absolute."""
    if is_remote(target):
        base = target[:target.rfind("/") + 1]
        return [path[len(base):] if kind == "s3" and path.startswith(base) else shard_id(kind, path)
                for kind, path in located]
    base = os.path.dirname(os.path.abspath(target))
    out = []
    for kind, path in located:
        full = shard_id(kind, path)
        inside = kind == "tar" and os.path.commonpath([base, full]) == base
        out.append(os.path.relpath(full, base).replace(os.sep, "/") if inside else full)
    return out


def _upload(url: str, header: dict, arrays: dict, client: S3Client, cache_dir: str | None) -> int:
    """Write the index locally, upload it to ``url`` and keep the local file as the index
    cache's copy of the uploaded version (loaders on this node then download nothing)."""
    folder = os.path.join(index_cache(cache_dir), "s3")
    private_dirs(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tmp")
    os.close(fd)
    try:
        size = write_index(tmp, header, arrays)
        with open(tmp, "rb") as f:
            etag = client.upload(url, size, lambda pos, n: memoryview(os.pread(f.fileno(), n, pos)))
        os.replace(tmp, s3_copy_path(url, etag, size, cache_dir))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return size
