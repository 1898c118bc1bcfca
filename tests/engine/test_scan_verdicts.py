"""The dataset index's scan verdicts through the loaders (#35 item 3): a sample the index
found intact is not checked again by a new process's first epoch; a damaged JPEG is
never delivered, in epoch 1 or later, whatever ``on_error`` says; bytes changed since
the index was built never keep its verdict. (Without an index: tests/engine/test_bad_images.py.)"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import turbofeed
from builders import encode, tar_bytes
from image_cases import cut_scan, ones_in_scan, textured
from turbofeed import transforms as T
from turbofeed.decode import native
from turbofeed.io.dsindex import fileformat
from turbofeed.io.dsindex.fileformat import read_index, write_index

pytestmark = pytest.mark.skipif(not native.available(), reason="the native decoder is off")

CENTRE = T.Compose([T.CenterCrop(120)])  # rows 60..180 of 240: the damage lies below
KEYS = {f"s{i:03d}" for i in range(8)}
DAMAGED = {"s001", "s002"}


def members(damage_at: int | None = None) -> list[tuple[str, bytes]]:
    """8 samples: s001 cut short, s002 with a bad Huffman code (both below the crop), the
    rest intact; ``damage_at``: that one's scan overwritten too (same length)."""
    out = []
    for i in range(8):
        data = encode(Image.fromarray(textured(seed=i)), quality=90)
        if i == 1:
            data = cut_scan(data, 0.85)
        elif i in (2, damage_at):
            data = ones_in_scan(data, 0.9)
        out += [(f"s{i:03d}.jpg", data), (f"s{i:03d}.cls", str(i).encode())]
    return out


@pytest.fixture
def indexed(tmp_path, tar_writer) -> str:
    """A folder of one shard, and its dataset index written beside it (as a first loader
    writes it)."""
    folder = tmp_path / "data"
    folder.mkdir()
    tar_writer(str(folder / "damaged.tar"), members())
    turbofeed.io.IndexedDataset(str(folder))
    assert os.path.isfile(folder / "turbofeed.index")
    return str(folder)


def checked_gids(monkeypatch) -> list[int]:
    """Sample ids whose whole scan the per-chunk decode is asked to check (a spy on the
    CPU path's native chunk calls: ``native.run_chunk_at``, which gathers a chunk's ids
    and checked flags itself, and ``native.run_chunk``, for the chunks selected in NumPy)."""
    seen: list[int] = []
    real, real_at = native.run_chunk, native.run_chunk_at

    def spy(fds, offsets, sizes, stamps, gids, checks, *args, **kw):
        seen.extend(int(g) for g, c in zip(gids, checks) if c)
        return real(fds, offsets, sizes, stamps, gids, checks, *args, **kw)

    def spy_at(order, first, step, count, row0, table, *args, **kw):
        seen.extend(asked_at(order, first, step, count, table))
        return real_at(order, first, step, count, row0, table, *args, **kw)

    monkeypatch.setattr(native, "run_chunk", spy)
    monkeypatch.setattr(native, "run_chunk_at", spy_at)
    return seen


def asked_at(order, first, step, count, table) -> list[int]:
    """The ids whose scans a ``run_chunk_at`` call checks: readable, on an open shard (the
    others go to ``run_chunk`` or the per-sample path) and not checked yet."""
    readable, source, fds, checked = table[0], table[1], table[2], table[6]
    gids = order[first:first + count * step:step] if count else order[:0]
    return [int(g) for g in gids if readable[g] and fds[source[g]] >= 0 and not checked[g]]


CHILD = inspect.getsource(asked_at) + """
import json, sys
import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import native
from turbofeed.io.dsindex import fileformat
from turbofeed.io.dsindex.fileformat import read_index, write_index
from turbofeed.engine.checked import CHECKED
loader = turbofeed.DataLoader(sys.argv[1], batch_size=4, num_workers=2, transform=T.Compose([T.CenterCrop(120)]),
                              on_error="skip", return_keys=True)
before = CHECKED.flags(loader.dataset).tolist()
checked = []
real, real_at = native.run_chunk, native.run_chunk_at
def spy(fds, offsets, sizes, stamps, gids, checks, *args, **kw):
    checked.extend(int(g) for g, c in zip(gids, checks) if c)
    return real(fds, offsets, sizes, stamps, gids, checks, *args, **kw)
def spy_at(order, first, step, count, row0, table, *args, **kw):
    checked.extend(asked_at(order, first, step, count, table))
    return real_at(order, first, step, count, row0, table, *args, **kw)
native.run_chunk, native.run_chunk_at = spy, spy_at
keys = sorted(k.split("/")[1] for _, _, ks in loader for k in ks)
print(json.dumps({"before": before, "checked": sorted(checked), "keys": keys}))
"""


def test_a_new_process_takes_the_stored_verdicts_and_checks_only_the_rest(indexed):
    index = os.path.join(indexed, "turbofeed.index")
    stamp = os.stat(index)
    done = subprocess.run([sys.executable, "-c", CHILD, indexed], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["before"] == [True, False, False, True, True, True, True, True]  # before any decode
    assert found["checked"] == [1, 2]  # epoch 1 checks only what the index did not find intact
    assert set(found["keys"]) == KEYS - DAMAGED
    after = os.stat(index)
    assert (after.st_ino, after.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)  # mapped, not rebuilt


@pytest.mark.parametrize("on_error", ["skip", "replace", "raise"])
def test_damage_is_never_delivered_with_the_index_verdicts(indexed, monkeypatch, on_error):
    checked = checked_gids(monkeypatch)
    loader = turbofeed.DataLoader(indexed, batch_size=4, num_workers=2, transform=CENTRE, on_error=on_error,
                                  return_keys=True)
    for epoch in range(2):
        if on_error == "raise":
            with pytest.raises(turbofeed.SampleError, match=r"damaged.tar/s00[12]: .*JPEG"):
                list(loader)
            continue
        keys = [k.split("/")[1] for _, _, ks in loader for k in ks]
        assert set(keys) == KEYS - DAMAGED, epoch
        assert len(keys) == (8 if on_error == "replace" else 6), epoch  # replaced by intact ones
    assert set(checked) <= {1, 2}  # the intact ones were never checked again


def test_bytes_changed_since_the_index_was_built_do_not_keep_its_verdict(indexed, monkeypatch, caplog):
    """s004 was found intact; its scan is then overwritten in place (same size, the mtime
    set back): the shard is not the indexed file any more (its ctime moved), so it is
    indexed on its own, without verdicts, and s004 is checked and refused in epoch 1."""
    shard = os.path.join(indexed, "damaged.tar")
    stamp = os.stat(shard)
    data = open(shard, "rb").read()
    fresh = tar_bytes(members(damage_at=4))
    assert len(fresh) == len(data) and fresh != data
    with open(shard, "r+b") as f:
        f.write(fresh)
    os.utime(shard, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    checked = checked_gids(monkeypatch)
    data = turbofeed.Dataset(indexed, index=os.path.join(indexed, "turbofeed.index"))
    loader = turbofeed.DataLoader(data, batch_size=4, num_workers=2, transform=CENTRE, on_error="skip",
                                  return_keys=True)
    keys = {k.split("/")[1] for _, _, ks in loader for k in ks}
    assert keys == KEYS - DAMAGED - {"s004"}
    assert "changed or added since the dataset index" in caplog.text
    assert 4 in checked



def test_an_index_of_the_previous_version_is_refused_and_rebuilt_with_verdicts(indexed, monkeypatch, caplog):
    index = os.path.join(indexed, "turbofeed.index")
    header, arrays = read_index(index)
    assert arrays["scan"].tolist() == [1, 2, 2, 1, 1, 1, 1, 1]  # damaged: s001 and s002
    old = {name: np.array(a) for name, a in arrays.items() if name != "scan"}
    monkeypatch.setattr(fileformat, "VERSION", 4)  # what the index was before verdicts
    write_index(index, header, old)
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        data = turbofeed.io.IndexedDataset(indexed)
    assert "format version 4" in caplog.text and "building it again" in caplog.text
    header, arrays = read_index(index)
    assert header["version"] == fileformat.VERSION and arrays["scan"].tolist() == [1, 2, 2, 1, 1, 1, 1, 1]
    assert data.sources[0].table.scans.tolist() == arrays["scan"].tolist()
