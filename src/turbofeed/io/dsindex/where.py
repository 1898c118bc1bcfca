"""Where a dataset index is written and looked up.

==========================  ==================================================  =========================
the data                    written to (``turbofeed index DATA``)               looked up by loaders
==========================  ==================================================  =========================
a local folder              ``DATA/turbofeed.index`` when the folder is         the shards' common folder,
                            writable, else the index cache                      then the index cache
an ``s3://`` prefix         the object ``PREFIX/turbofeed.index`` when the      the shards' common prefix
                            credentials may PUT, else the index cache           (*), then the index cache
a pattern, list or file     the index cache                                     the same two places
``--out PATH``              ``PATH`` (a file, or an ``s3://`` URL)              ``index=PATH`` (loaders)
==========================  ==================================================  =========================

(*) Found in the listing that resolved the dataset (a prefix, a glob, or more than four
shards named in one folder), so looking costs no request; for a few shards named one by
one, only the index cache is looked in.

The index cache is ``<cache dir>/dataset-index/<digest of the shard list>.index`` (cache
dir: ``$TURBOFEED_CACHE_DIR`` or ``~/.cache/turbofeed``, its folders created mode 0700;
an index found there is used only when nobody but the user could have written it:
:mod:`turbofeed.io.local.private`); the digest is of every shard's
absolute path or URL, in order, so it names one shard list. An ``s3://`` index is
read from a local copy in ``<cache dir>/dataset-index/s3/``, downloaded once per version
(ETag) of the object.
"""

from __future__ import annotations

import glob
import hashlib
import os
import tempfile
from collections.abc import Sequence

from ..local.index import default_cache_dir
from ..local.private import private_dirs
from ..paths import INDEX_NAME, PathSpec, flat_paths
from ..retry import RemoteError
from ..stores.families import is_remote
from ..stores.client import S3Client
from ..stores.errors import not_found
from ..stores.urls import is_shard, listed_info
from .load import shard_id


def index_cache(cache_dir: str | None) -> str:
    return os.path.join(cache_dir or default_cache_dir(), "dataset-index")


def cached_path(located: Sequence[tuple[str, str]], cache_dir: str | None) -> str:
    """The index cache's file for the shards of ``located``."""
    ids = "\n".join(shard_id(kind, path) for kind, path in located if kind in ("tar", "s3"))
    return os.path.join(index_cache(cache_dir), hashlib.sha1(ids.encode()).hexdigest()[:24] + ".index")


def beside(located: Sequence[tuple[str, str]]) -> list[str]:
    """The index next to the data: in the common folder of the local shards, and under the
    common prefix of the ``s3://`` ones."""
    out = []
    local = [os.path.dirname(shard_id(kind, path)) for kind, path in located if kind == "tar"]
    if local:
        out.append(os.path.join(os.path.commonpath(local), INDEX_NAME))
    urls = [path for kind, path in located if kind == "s3"]
    if urls:
        prefix = os.path.commonprefix(urls)
        prefix = prefix[:prefix.rfind("/") + 1]
        if prefix.count("/") >= 3:  # s3://bucket/...
            out.append(prefix + INDEX_NAME)
    return out


def default_target(spec: PathSpec, located: Sequence[tuple[str, str]], cache_dir: str | None) -> str:
    """Where ``turbofeed index`` writes the index of ``spec`` (see the module docstring; a
    list of one item is that item)."""
    if not isinstance(spec, (str, os.PathLike)) and len(spec) == 1:
        spec = spec[0]
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if is_remote(text):
            if not is_shard(text) and not glob.has_magic(text) and "{" not in text:
                return text.rstrip("/") + "/" + INDEX_NAME
        else:
            folder = os.path.expanduser(text)
            if os.path.isdir(folder) and os.access(folder, os.W_OK):
                return os.path.join(folder, INDEX_NAME)
    return cached_path(located, cache_dir)


def s3_copy_path(url: str, etag: str, size: int, cache_dir: str | None) -> str:
    """The index cache's copy of one version of the index object ``url``."""
    stem = hashlib.sha1(url.encode()).hexdigest()[:20]
    version = hashlib.sha1(f"{etag}\0{size}".encode()).hexdigest()[:12]
    return os.path.join(index_cache(cache_dir), "s3", f"{stem}-{version}.index")


def s3_copy(url: str, client: S3Client, cache_dir: str | None, *, ask: bool = False) -> str | None:
    """The local copy of the index object ``url`` (downloaded when this version is not
    there yet; older versions' copies are removed), or None when there is no such object:
    as the dataset's listing found it, or, with ``ask``, a HEAD when it did not list it.

    Raises:
        RemoteError: the object exists but cannot be read.
    """
    info = listed_info(url, client)
    if info is None and ask:
        try:
            info = client.head(url)
        except RemoteError as exc:
            if not not_found(exc):
                raise
    if info is None:
        return None
    local = s3_copy_path(url, info.version, info.size, cache_dir)
    folder, stem = os.path.dirname(local), os.path.basename(local).split("-")[0]
    try:
        if os.path.getsize(local) == info.size:
            return local
    except OSError:
        pass
    private_dirs(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".download-", suffix=".tmp")
    try:
        client.download_to(url, info.size, fd, expect=info)
        os.close(fd)
        fd = -1
        os.chmod(tmp, 0o644)
        os.replace(tmp, local)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
    for entry in os.scandir(folder):  # copies of older versions of the same object
        if entry.name.startswith(stem + "-") and entry.path != local:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    return local


def describe(spec: PathSpec) -> str:
    """``spec`` as a command line argument (a list: its first item and a count)."""
    if isinstance(spec, (str, os.PathLike)):
        return os.fspath(spec)
    items = [os.fspath(x) for x in flat_paths(spec)]  # a mix's entry may be a list of paths
    return items[0] if len(items) == 1 else f"{items[0]} ... ({len(items)} paths)"
