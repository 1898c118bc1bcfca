"""A local shard deleted, truncated or made unreadable (a directory in its place: chmod 000
stops no read of root's) at each public entry point of a loader: construction, ``iter``,
``next``, ``set_epoch`` and ``load_state_dict``. What reaches the user is a one-line
``StorageError`` or ``DatasetError`` naming the shard (a ``ValueError`` naming it where a
resume state no longer fits the data), or the shard reported as damaged: never a bare
``OSError``. Once the shard is back, the next pass reads it."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable

import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T

SHARDS, PER_SHARD, BATCH = 3, 8, 4
BROKEN = 1  # the shard each case damages


def _members(s: int) -> list[tuple[str, bytes]]:
    return [m for i in range(PER_SHARD) for m in ((f"s{s}-{i:02d}.jpg", small_jpeg(10 * s + i)),
                                                  (f"s{s}-{i:02d}.cls", str(i % 3).encode()))]


@pytest.fixture
def shards(tmp_path) -> list[str]:
    folder = tmp_path / "data"
    folder.mkdir()
    return [write_tar(str(folder / f"shard-{s}.tar"), _members(s)) for s in range(SHARDS)]


def _delete(path: str) -> None:
    os.remove(path)


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 3)


def _unreadable(path: str) -> None:
    os.remove(path)
    os.mkdir(path)  # open() fails with EISDIR, for root as for anyone


DAMAGE: dict[str, Callable[[str], None]] = {"deleted": _delete, "truncated": _truncate, "unreadable": _unreadable}


def _loader(paths: list[str], tmp_path) -> turbofeed.DataLoader:
    return turbofeed.DataLoader(turbofeed.Dataset(paths, cache_dir=str(tmp_path / "cache")), batch_size=BATCH,
                                num_workers=2, shuffle=False, transform=T.imagenet_eval(16))


def _at_construction(paths, tmp_path, damage):
    damage()
    list(_loader(paths, tmp_path))


def _at_iter(paths, tmp_path, damage):
    loader = _loader(paths, tmp_path)
    list(loader)
    damage()  # between epochs
    iter(loader)


def _at_next(paths, tmp_path, damage):
    it = iter(_loader(paths, tmp_path))
    next(it)
    damage()
    list(it)


def _at_set_epoch(paths, tmp_path, damage):
    loader = _loader(paths, tmp_path)
    list(loader)
    damage()
    loader.set_epoch(5)
    list(loader)


def _at_load_state_dict(paths, tmp_path, damage):
    loader = _loader(paths, tmp_path)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    damage()
    loader.load_state_dict(state)
    list(loader)


ENTRY_POINTS = {"construction": _at_construction, "iter": _at_iter, "next": _at_next,
                "set_epoch": _at_set_epoch, "load_state_dict": _at_load_state_dict}


@pytest.mark.parametrize("how", list(DAMAGE))
@pytest.mark.parametrize("point", list(ENTRY_POINTS))
def test_a_broken_shard_at_each_entry_point_is_named_never_a_bare_os_error(shards, tmp_path, caplog, point, how):
    broken = shards[BROKEN]
    caplog.set_level(logging.WARNING, "turbofeed")
    try:
        ENTRY_POINTS[point](shards, tmp_path, lambda: DAMAGE[how](broken))
    except (turbofeed.StorageError, turbofeed.DatasetError) as exc:
        assert "shard-1.tar" in str(exc) and "\n" not in str(exc)
    except ValueError as exc:  # the data changed under a saved state: the documented refusal
        assert point == "load_state_dict" and str(exc).startswith("resume state is from other data")
        assert "shard-1.tar" in str(exc)
    except OSError as exc:
        pytest.fail(f"a bare {type(exc).__name__} reached the user: {exc}")
    else:  # what is left of a truncated shard is read, and the shard reported
        assert how == "truncated"
        assert any("shard-1.tar" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("how", ["deleted", "unreadable"])
def test_a_shard_gone_between_epochs_raises_storage_error_and_the_loader_recovers(shards, tmp_path, how):
    loader = _loader(shards, tmp_path)
    full = [int(x) for batch in loader for x in batch[1]]
    kept = shards[BROKEN] + ".kept"
    shutil.copy(shards[BROKEN], kept)
    DAMAGE[how](shards[BROKEN])
    with pytest.raises(turbofeed.StorageError, match=r"^storage: .*shard-1\.tar: ") as info:
        iter(loader)
    assert info.value.shard == shards[BROKEN]
    if os.path.isdir(shards[BROKEN]):
        os.rmdir(shards[BROKEN])
    os.replace(kept, shards[BROKEN])  # back: the next pass reads it
    assert [int(x) for batch in loader for x in batch[1]] == full
