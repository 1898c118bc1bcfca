"""The dataset index built when a loader needs it: the first loader over local tar shards
without an index that describes them all as they are now builds one (every shard read in
parallel, a progress bar on a terminal) and writes it where ``turbofeed index`` would
(next to the data when it is a writable folder, else the index cache:
:mod:`~turbofeed.io.dsindex.where`); later loaders map it.

- **Changed shards** (another file identity: replaced, rewritten, swapped by ``mv``) and
  added ones are read again; the others' parts are copied from the index found, without
  a read. The result is a new file, renamed over the old one when complete: a loader
  that mapped the old one keeps its map, none ever sees half a file.
- **One build per node**: the build runs under the index's lock
  (:mod:`~turbofeed.io.dsindex.lock`). A process that had to wait for it looks again
  and maps what the builder wrote; it builds only what is still missing (another shard
  list than the builder's, say).
- **Nothing written** when the index has nowhere to go: the cache folder is one others
  can write (its index would not be believed: :mod:`turbofeed.io.local.private`), the
  lock or the file cannot be written (a read-only cache, a full disk), or the wait for
  another builder ran out. The index is then built in memory for this process only
  (one warning says why, except for the wait, whose warning the lock gives).

``index=False`` (:func:`memory_index`) builds the same index in memory for this process
only: no index is looked for, none is written, no lock or cache folder is touched.

Small datasets are indexed the same way: a handful of shards costs milliseconds, and
one code path serves every size. ``s3://`` shards are not (building would download every
shard): ``turbofeed index PREFIX`` writes their index.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

from ..local.files import file_id
from ...errors import DatasetError
from ..local.private import distrust_folder, private_dirs, said, trusted
from ..paths import PathSpec
from .build import index_header, read_parts
from .fileformat import remove_temporaries, write_index
from .load import DatasetIndex
from .lock import build_lock
from .parts import indexed_part, join
from .where import default_target, describe, index_cache

log = logging.getLogger("turbofeed")

_MEMORY = "(built in memory)"
#: Where an index built in memory says it is: shard names relative to ``/`` (no cwd).
_NOWHERE = os.path.join(os.sep, "turbofeed.index")


def auto_index(spec: PathSpec, located: Sequence[tuple[str, str]], found: DatasetIndex | None,
               seen: dict[str, tuple | None], *, cache_dir: str | None = None,
               progress: bool | None = None) -> DatasetIndex:
    """The index of the local tar shards of ``located`` (what ``spec`` resolved to), built
    now, reusing ``found`` (an index describing some of them as they are) for the shards
    it describes, and written for the next loaders (see the module docstring). ``seen``:
    the identity (:func:`file_identity`) of each index file the caller looked at, when it
    looked: one that is another file once the lock is held was written meanwhile.

    Raises:
        DatasetError: a shard cannot be read.
    """
    shards = [(kind, path) for kind, path in located if kind == "tar"]
    target = default_target(spec, shards, cache_dir)
    cached = os.path.abspath(target).startswith(os.path.abspath(index_cache(cache_dir)) + os.sep)
    why = _no_home(target, cached)
    if why is not None:
        say = log.info if said(why) else log.warning  # a refusal already gave the reason: once is enough
        say("turbofeed: the dataset index of %s cannot be written to %s (%s): indexing the shards in memory "
            "for this process", describe(spec), target, why)
        return _build(spec, shards, found, None, progress)
    with build_lock(target) as held:
        if not held:
            return _build(spec, shards, found, None, progress)
        if file_identity(target) not in (seen.get(target), None):  # written since the caller looked
            ready = _open(target, cached)
            if ready is not None and ready.covers(shards) == len(shards) and not ready.stale(shards):
                log.info("turbofeed: using the dataset index %s another process built", target)
                return ready
            found = ready if ready is not None and (found is None or ready.covers(shards) > found.covers(shards)) \
                else found
        if remove_temporaries(target):
            log.info("turbofeed: removed what a killed build of %s left", target)
        return _build(spec, shards, found, target, progress)


def memory_index(spec: PathSpec, located: Sequence[tuple[str, str]], *,
                 progress: bool | None = None) -> DatasetIndex | None:
    """``index=False``: the index of the local tar shards of ``located``, built in memory
    for this process by the same reads as :func:`auto_index` (every shard read once, in
    parallel), but without looking for an index (one next to the data or in the cache is
    not used) and writing nothing (no index, lock or cache folder). None when there are
    no local tar shards or there are ``s3://`` ones (those are indexed shard by shard, as
    without an index: building would download every shard).

    Raises:
        DatasetError: a shard cannot be read.
    """
    if any(kind == "s3" for kind, _ in located):
        return None
    shards = [(kind, path) for kind, path in located if kind == "tar"]
    return _build(spec, shards, None, None, progress) if shards else None


def _no_home(target: str, cached: bool) -> str | None:
    """Why the index cannot be written to ``target`` (or None): no such folder that this
    user may write, or one in the cache whose index would not be believed."""
    folder = os.path.dirname(os.path.abspath(target))
    if cached:
        try:
            private_dirs(folder)
        except OSError as exc:
            return f"cannot create {folder}: {exc}"
        probe = distrust_folder(folder)  # the folder and those above it, as a file there would be judged
        if probe is not None:
            return probe
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


def file_identity(path: str) -> tuple | None:
    """The identity of the file ``path`` (:class:`~turbofeed.io.local.files.FileId`), or
    None when there is none."""
    try:
        return tuple(file_id(path))
    except OSError:
        return None


def _open(target: str, cached: bool) -> DatasetIndex | None:
    """The index another process wrote at ``target`` (None if it is not usable; a
    warning says why, as for any index found)."""
    if cached and not trusted(target, "the dataset index"):
        return None
    try:
        return DatasetIndex(target)
    except (DatasetError, OSError, KeyError, TypeError, ValueError) as exc:
        log.warning("turbofeed: %s: not used (%s)", target, exc)
        return None


def _build(spec: PathSpec, shards: list[tuple[str, str]], found: DatasetIndex | None, target: str | None,
           progress: bool | None) -> DatasetIndex:
    """Read the shards ``found`` does not describe as they are, join, write to ``target``
    (None: nowhere) and open the result."""
    started = time.perf_counter()
    known = {}
    if found is not None:
        stale = set(found.stale(shards))
        for pos, (kind, path) in enumerate(shards):
            k = found.find(kind, path)
            if pos not in stale and k is not None:
                known[pos] = indexed_part(found.header, found.arrays, found.sample_start, k)
    parts = read_parts(shards, progress=progress, known=known)
    fields, arrays = join(parts)
    if target is not None:
        try:
            write_index(target, index_header(describe(spec), shards, parts, fields, arrays, target), arrays)
            index = DatasetIndex(target)
        except OSError as exc:  # a full disk, a folder made read-only meanwhile
            log.warning("turbofeed: cannot write the dataset index %s (%s): indexing the shards in memory "
                        "for this process", target, exc)
            target = None
    if target is None:
        header = index_header(describe(spec), shards, parts, fields, arrays, _NOWHERE)
        index = DatasetIndex(_MEMORY, _NOWHERE, loaded=(header, arrays))
    log.info("turbofeed: dataset index %s: %d shards (%d read, %d unchanged), %d samples, in %.2f s",
             target or _MEMORY, len(shards), len(shards) - len(known), len(known), index.header["samples"],
             time.perf_counter() - started)
    return index
