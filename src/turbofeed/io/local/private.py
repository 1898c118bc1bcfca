"""The cache directory is private to the user, and nothing found in it is believed unless
only the user could have put it there.

An index in the cache says which bytes of a shard are which sample and what its label
is: whoever can write it can relabel the data. So:

- turbofeed creates every folder of its cache it makes mode 0700 (:func:`private_dirs`);
  a folder that exists already is left as it is (one an older turbofeed made 0755 is
  still safe: nobody else can write it).
- A cached file is used only when :func:`distrust` finds no reason against it: it is a
  regular file (not a link), owned by the user (the effective uid), writable by nobody
  else; and no folder on its path, up to ``/``, lets another user replace it. A folder
  lets others replace its entries when it is owned by another user (other than root),
  or when its group or others may write it, unless it has the sticky bit and the entry
  below it belongs to the user (the sticky bit stops others renaming or deleting it:
  ``/tmp`` and ``/scratch``, mode 1777, are fine homes for a cache folder of one's own).
  Group-writable counts as writable by others: a group is other people.
- A file refused is not used (the caller builds what it would have held) and a warning
  says which file and why, once per reason.

What lies next to the data (``DATA/turbofeed.index``) is not checked this way: whoever can
write there can rewrite the shards too, so it is exactly as trusted as the data.
"""

from __future__ import annotations

import logging
import os
import stat

log = logging.getLogger("turbofeed")

_WARNED: set[str] = set()


def private_dirs(folder: str) -> None:
    """Create ``folder`` and any missing parents, each mode 0700 (not the umask's 0755).

    Raises:
        OSError: a folder cannot be created.
    """
    folder = os.path.abspath(folder)
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another process made it at the same time


def distrust(path: str) -> str | None:
    """Why the cached file ``path`` must not be believed (one line), or None when only the
    user (or root) could have written it and can have replaced it (see the module
    docstring). A file that does not exist has nothing against it (None).

    Example: ``"/tmp/cache/dataset-index/x.index is owned by uid 1001, not by you (uid
    1000)"``, ``"/shared/cache is writable by others (mode 0777, no sticky bit)"``.
    """
    me = os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be checked: {exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a link or other)"
    if st.st_uid != me:
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return distrust_folder(os.path.dirname(os.path.abspath(path)), st.st_uid)


def distrust_folder(folder: str, child_uid: int | None = None) -> str | None:
    """Why a file of the user's in ``folder`` could be replaced by another user (one
    line, as :func:`distrust`), or None; ``child_uid``: the owner of the entry in it
    (default: the user)."""
    me = os.geteuid()
    child_uid = me if child_uid is None else child_uid
    folder = os.path.abspath(folder)
    while True:
        try:
            st = os.stat(folder)
        except OSError as exc:
            return f"{folder} cannot be checked: {exc}"
        why = _unsafe_folder(folder, st, child_uid, me)
        if why is not None:
            return why
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder, child_uid = parent, st.st_uid


def _unsafe_folder(folder: str, st: os.stat_result, child_uid: int, me: int) -> str | None:
    if st.st_uid not in (me, 0):
        return f"{folder} is owned by uid {st.st_uid}, not by you (uid {me}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not (mode & stat.S_ISVTX and child_uid in (me, 0)):
        sticky = "its entry on the way is not yours" if mode & stat.S_ISVTX else "no sticky bit"
        return f"{folder} is writable by others (mode {mode:04o}, {sticky})"
    return None


def said(why: str) -> bool:
    """True when a warning already gave ``why`` (a reason :func:`distrust` found)."""
    return why in _WARNED


def trusted(path: str, what: str) -> bool:
    """True when :func:`distrust` finds nothing against ``path``; else False, with one
    warning (once per reason) saying that ``what`` at ``path`` is not used and why."""
    why = distrust(path)
    if why is None:
        return True
    if why not in _WARNED:
        _WARNED.add(why)
        log.warning("turbofeed: not using %s %s: %s (only files that you alone could have written "
                    "are believed; see docs/index.md)", what, path, why)
    return False
