"""decode.cpu per chunk (engine/chunks.py): the same batches as the per-sample path, bad
samples through the same policy, storage faults raised, one native call per chunk; the
GPU feed per chunk (engine/gpu_chunks.py) likewise, with one decoder call per batch."""

from __future__ import annotations

import errno
import os
import time

import numpy as np
import pytest
import torch

import turbofeed
from builders import encode, photo, write_tar
from image_cases import cut_scan, ones_in_scan
from turbofeed import transforms as T
from turbofeed.decode import native
from turbofeed.engine import chunk_reads, chunks, choose
from turbofeed.engine.chunks import ChunkedCpuDecode, chunk_size
from turbofeed.errors import SampleError, StorageError
from turbofeed.testing import CpuStandInDecoder
from turbofeed.transforms.draws import Draws, epoch_key
from turbofeed.engine.gpu_chunks import ChunkedGpuDecode

pytestmark = pytest.mark.skipif(not native.available(), reason="the native decoder is not built")


def per_sample(monkeypatch):
    """Turn the chunked path off: the fused decode runs per sample, as before it existed."""
    monkeypatch.setattr(choose, "chunked", lambda *a, **k: False)


def epoch(loader):
    """Every batch of one epoch, copied (slots are reused)."""
    return [[list(part) if isinstance(part, list) else part.numpy().copy() for part in batch] for batch in loader]


def stage_of(loader) -> object:
    it = iter(loader)
    stage = it.engine.decode
    it.close()
    return stage


def same_batches(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for p, q in zip(x, y):
            np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("transform, channels_last, workers", [
    (T.imagenet_train(64), False, 2),
    (T.imagenet_train(64), False, 0),
    (T.imagenet_eval(56, resize=64, normalize=True), True, 2),
    (T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.Normalize()]), False, 3),
])
def test_chunks_give_the_per_sample_path_batches_bit_for_bit(shards, monkeypatch, transform, channels_last, workers):
    kw = dict(batch_size=24, num_workers=workers, shuffle=True, seed=5, transform=transform,
              channels_last=channels_last, return_keys=True)
    loader = turbofeed.DataLoader(shards, **kw)
    assert isinstance(stage_of(loader), ChunkedCpuDecode)
    loader.set_epoch(1)
    chunked = epoch(loader)
    per_sample(monkeypatch)
    reference = turbofeed.DataLoader(shards, **kw)
    assert not isinstance(stage_of(reference), ChunkedCpuDecode)
    reference.set_epoch(1)
    same_batches(chunked, epoch(reference))


@pytest.mark.parametrize("gpu", [False, True])
def test_a_ranks_chunks_give_the_per_sample_path_batches(shards, monkeypatch, gpu):
    """A rank of several: its order is a strided view of the epoch's, and a chunk's ids a
    slice of it (the native calls take contiguous arrays)."""
    kw = dict(batch_size=12, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_train(32), rank=1,
              world_size=3, return_keys=True)
    decoder = (lambda: TensorDecoder()) if gpu else (lambda: None)
    chunked = epoch(turbofeed.DataLoader(shards, gpu_decode=decoder(), **kw))
    per_sample(monkeypatch)
    same_batches(chunked, epoch(turbofeed.DataLoader(shards, gpu_decode=decoder(), **kw)))


def test_one_native_call_per_chunk(shards, monkeypatch):
    calls = {"chunks": 0, "rows": 0, "opening": 0}
    run_at, run = native.run_chunk_at, native.run_chunk

    def counting(*a, **k):
        calls["chunks"] += 1
        calls["rows"] += a[3]
        return run_at(*a, **k)

    def opening(*a, **k):  # a chunk whose shards were not open yet: they are opened, it runs again
        calls["opening"] += 1
        return run(*a, **k)

    monkeypatch.setattr(native, "run_chunk_at", counting)
    monkeypatch.setattr(native, "run_chunk", opening)
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=2, transform=T.imagenet_train(32))
    n = sum(len(labels) for _, labels in loader)
    assert n == 120 and chunk_size(40, 2) == 32
    assert calls["chunks"] == 6 and calls["rows"] == 120  # 32 + 8 in each of 3 batches of 40
    # each opening call opened a shard (3), one more where both threads raced for one
    assert 1 <= calls["opening"] <= 4
    seconds = loader.stats.as_dict()["seconds"]
    assert seconds["fetch"] > 0 and seconds["decode.cpu"] > 0 and loader.stats.as_dict()["bytes_read"] > 0
    calls.update(chunks=0, rows=0, opening=0)
    assert sum(len(labels) for _, labels in loader) == 120  # the next epoch finds every shard open
    assert calls == {"chunks": 6, "rows": 120, "opening": 0}


def test_chunk_size_follows_threads_within_bounds():
    assert chunk_size(256, 4) == 64 and chunk_size(256, 6) == 43 and chunk_size(256, 2) == 64
    assert chunk_size(256, 8) == chunk_size(256, 64) == 32  # never below the floor
    assert chunk_size(8, 1) == 8  # never more than a batch
    assert chunk_size(1, 1) == chunk_size(1, 8) == 1  # a batch of one: chunks of one
    assert chunk_size(256, 0) == 64


def bad_shard(tmp_path) -> tuple[str, dict[str, str]]:
    """A shard of good JPEGs with bad ones among them, each a different failure."""
    good = [encode(photo(60 + i, 80, seed=i), quality=90) for i in range(30)]
    damaged = ones_in_scan(good[3])  # header intact, scan damaged below any crop
    bad = {
        "05": cut_scan(good[5]),             # truncated: no EOI (the general decoder judges)
        "09": damaged,                        # damaged entropy data
        "13": b"not an image at all" * 10,   # not an image
        "17": encode(photo(50, 50).convert("CMYK"), quality=90),  # CMYK: the general path, good
        "21": encode(photo(50, 50), "PNG"),  # PNG: the general path, good
    }
    members = []
    for i, jpg in enumerate(good):
        key = f"{i:02d}"
        members += [(f"{key}.jpg", bad.get(key, jpg)), (f"{key}.cls", str(i).encode())]
    path = str(tmp_path / "bad.tar")
    write_tar(path, members)
    return path, {"05": "truncated", "09": "damaged", "13": "not an image"}


def same_as_per_sample(path: str, monkeypatch, *, batch_size: int, seed: int, on_error: str, errors: int) -> set[str]:
    """An epoch of ``path`` per chunk equals one per sample (batches, error counts, which
    are ``errors`` in all); the keys it delivered."""
    kw = dict(batch_size=batch_size, num_workers=2, shuffle=True, seed=seed, transform=T.imagenet_train(32),
              on_error=on_error, return_keys=True)
    assert isinstance(stage_of(turbofeed.DataLoader(path, **kw)), ChunkedCpuDecode)
    loader = turbofeed.DataLoader(path, **kw)  # no pass but the one counted
    got, stats = epoch(loader), loader.stats.as_dict()
    with monkeypatch.context() as patch:
        per_sample(patch)
        reference = turbofeed.DataLoader(path, **kw)
        same_batches(got, epoch(reference))
    assert stats["errors"] == reference.stats.as_dict()["errors"] and sum(stats["errors"].values()) == errors
    return {k.rsplit("/", 1)[1] for batch in got for k in batch[2]}


@pytest.mark.parametrize("on_error", ["replace", "skip"])
def test_bad_samples_take_the_per_sample_policy(tmp_path, monkeypatch, on_error):
    path, _ = bad_shard(tmp_path)
    delivered = same_as_per_sample(path, monkeypatch, batch_size=10, seed=1, on_error=on_error, errors=3)
    assert not delivered & {"05", "09", "13"} and {"17", "21"} <= delivered


@pytest.mark.parametrize("on_error", ["replace", "skip"])
def test_samples_the_dataset_knows_are_bad_go_to_the_per_sample_path(tmp_path, monkeypatch, on_error):
    """Samples the dataset knows are bad (no image member; a good JPEG whose label does not
    parse) are not read by their chunk: the per-sample path names their error."""
    members = []
    for i in range(24):
        if i not in (6, 19):  # two keys with a label and no image
            members.append((f"{i:02d}.jpg", encode(photo(50 + i, 60, seed=i), quality=90)))
        members.append((f"{i:02d}.cls", b"not a number" if i == 10 else str(i).encode()))
    path = write_tar(str(tmp_path / "holes.tar"), members)
    delivered = same_as_per_sample(path, monkeypatch, batch_size=12, seed=2, on_error=on_error, errors=3)
    assert not delivered & {"06", "10", "19"} and len(delivered) == 21


def test_raise_names_the_shard_and_key(tmp_path):
    path, _ = bad_shard(tmp_path)
    loader = turbofeed.DataLoader(path, batch_size=30, num_workers=2, shuffle=False,
                                  transform=T.imagenet_train(32), on_error="raise")
    with pytest.raises(SampleError) as err:
        list(loader)
    assert err.value.shard == path and err.value.key == "05"


def test_damage_below_every_crop_is_caught_in_the_first_epoch(tmp_path):
    """The first decode checks the whole scan: damage past the crop's last row is found
    at once, not in a later epoch whose crop reaches it."""
    good = [encode(photo(200, 200, seed=i), quality=90) for i in range(8)]
    members = []
    for i, jpg in enumerate(good):
        data = ones_in_scan(jpg, fraction=0.95) if i == 4 else jpg
        members += [(f"{i}.jpg", data), (f"{i}.cls", b"1")]
    path = str(tmp_path / "late.tar")
    write_tar(path, members)
    # the centre 20 x 20 only: the damage lies in the bottom rows, below the crop
    loader = turbofeed.DataLoader(path, batch_size=8, num_workers=1, transform=T.Compose([T.CenterCrop(20)]),
                                  on_error="skip")
    sizes = [len(labels) for _, labels in loader]
    assert sizes == [7] and loader.stats.as_dict()["errors"] == {"decode.cpu": 1}


def test_a_shard_replaced_during_the_pass_raises(tmp_path):
    members = [(f"{i}.jpg", encode(photo(64, 64, seed=i), quality=90)) for i in range(64)]
    path = write_tar(str(tmp_path / "s.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=16, num_workers=1, prefetch=1, transform=T.imagenet_train(32))
    it = iter(loader)
    next(it)
    os.utime(path, ns=(1, 1))  # a change to the indexed file (its ctime and mtime move)
    with pytest.raises(StorageError, match="s.tar"):
        for _ in it:
            pass


def fail_reads(monkeypatch, errnos: dict[int, int]) -> None:
    """Each chunk's read of row ``i`` fails with ``errnos[i]`` (a device error cannot be
    made on a healthy disk: the native call runs, then its codes say so), whichever of
    the two native chunk calls reads it (the first chunks open the shards: run_chunk)."""
    read, read_at = native.run_chunk, native.run_chunk_at

    def failed(codes):
        codes = codes.copy()
        for row, code in errnos.items():
            codes[row] = (native.READ_ERRNO, code)
        return codes

    def failing(*a, **k):
        codes, reading = read(*a, **k)
        return failed(codes), reading

    def failing_at(*a, **k):
        codes, reading, nbytes = read_at(*a, **k)
        return failed(np.zeros((a[3], 2), np.int32) if codes is None else codes), reading, nbytes

    monkeypatch.setattr(native, "run_chunk", failing)
    monkeypatch.setattr(native, "run_chunk_at", failing_at)


def test_a_read_error_on_an_open_shard_is_a_storage_error_naming_it(shards, monkeypatch):
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1, transform=T.imagenet_train(32))
    list(loader)  # every shard open: the chunks are one native call each
    read_at = native.run_chunk_at

    def failing_at(*a, **k):
        codes, reading, nbytes = read_at(*a, **k)
        assert codes is None  # no chunk went back to the opening path
        codes = np.zeros((a[3], 2), np.int32)
        codes[3] = (native.READ_ERRNO, errno.EIO)
        return codes, reading, nbytes

    monkeypatch.setattr(native, "run_chunk_at", failing_at)
    with pytest.raises(StorageError, match=r"\.tar: read of \d+ bytes at offset \d+ failed: Input/output error"):
        list(loader)


def test_a_read_error_is_a_storage_error_naming_the_shard(shards, monkeypatch):
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1, transform=T.imagenet_train(32))
    fail_reads(monkeypatch, {-1: errno.EIO})
    with pytest.raises(StorageError, match="Input/output error"):
        list(loader)


def test_the_first_failed_read_of_a_chunk_is_the_one_named(shards, monkeypatch):
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1, transform=T.imagenet_train(32))
    fail_reads(monkeypatch, {1: errno.EIO, -1: errno.ENOSPC})  # row 1 is the first to fail
    with pytest.raises(StorageError, match="Input/output error"):
        list(loader)


def test_passes_a_chunk_cannot_decode_stay_per_sample(shards):
    """EXIF orientation turns each sample on its own: no chunks (engine.chunks.chunked)."""
    kw = dict(batch_size=8, num_workers=2, transform=T.imagenet_train(32))
    assert isinstance(stage_of(turbofeed.DataLoader(shards, **kw)), ChunkedCpuDecode)
    assert not isinstance(stage_of(turbofeed.DataLoader(shards, apply_exif_orientation=True, **kw)), ChunkedCpuDecode)


def raw_file(tmp_path, blobs: list[bytes]):
    """The blobs one after another in a file: (path, fd, offsets, sizes, stamps)."""
    path = tmp_path / "raw"
    path.write_bytes(b"".join(blobs))
    st = os.stat(path)
    sizes = np.array([len(b) for b in blobs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    stamps = np.tile([st.st_size, st.st_mtime_ns, st.st_ctime_ns], (len(blobs), 1)).astype(np.int64)
    return path, os.open(path, os.O_RDONLY), offsets, sizes, stamps


def test_native_calls_report_each_sample(tmp_path):
    """read_chunk and run_chunk alone: statuses per sample, rows where asked, the
    windows a transform's program gives, the pixels crop_resize gives."""
    jpgs = [encode(photo(40, 50, seed=i), quality=90) for i in range(3)]
    blobs = [jpgs[0], encode(photo(40, 50), "PNG"), jpgs[1], jpgs[2]]
    path, fd, offsets, sizes, stamps = raw_file(tmp_path, blobs)
    fds = np.full(4, fd, np.int32)
    try:
        buf = np.zeros(int(sizes.sum()), np.uint8)
        head = native.read_chunk(fds, offsets, sizes, stamps, buf, offsets)
        assert head.tolist() == [[0, 40, 50], [1, 0, 0], [0, 40, 50], [0, 40, 50]]
        assert bytes(buf) == path.read_bytes()
        changed = stamps.copy()
        changed[2, 2] += 1  # another ctime: not the indexed file
        assert native.read_chunk(fds, offsets, sizes, changed, buf, offsets)[2, 0] == native.READ_CHANGED
        compose = T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip()])
        gids = np.array([5, 6, 7, 8], np.int64)
        out = np.zeros((6, 3, 20, 20), np.uint8)
        rows = np.array([4, 1, 0, 2])
        codes, reading = native.run_chunk(fds, offsets, sizes, stamps, gids, np.ones(4, bool), rows,
                                          compose.program, epoch_key(1, 2), out)
        assert codes.tolist() == [[0, 0], [native.RUN_GENERAL, 0], [0, 0], [0, 0]] and reading > 0
        for i in (0, 2, 3):
            window = compose.window(40, 50, Draws(1, 2, int(gids[i])))
            expected = np.empty((3, 20, 20), np.uint8)
            native.crop_resize(blobs[i], window.box, expected, flip=window.flip)
            np.testing.assert_array_equal(out[rows[i]], expected)
        assert not out[3].any() and not out[5].any()  # rows not asked for are left alone
        codes, _ = native.run_chunk(fds, offsets, sizes, changed, gids, np.ones(4, bool), rows, compose.program, 0, out)
        assert codes[:, 0].tolist() == [0, native.RUN_GENERAL, native.READ_CHANGED, 0]
        small = np.zeros((6, 3, 10, 10), np.uint8)  # windows of another size: the per-sample path
        codes, _ = native.run_chunk(fds, offsets, sizes, stamps, gids, np.ones(4, bool), rows, compose.program, 0,
                                    small)
        assert codes[:, 0].tolist() == [native.RUN_GENERAL] * 4
    finally:
        os.close(fd)


def test_run_chunk_at_takes_its_rows_from_the_order_and_the_tables(tmp_path):
    """run_chunk_at alone: sample ids from a strided order, reads gathered by id, rows
    not readable by range or on a shard not open left untouched, and for the decoded rows
    the pixels run_chunk gives, their labels and ids written and their checked flags set."""
    jpgs = [encode(photo(40, 50, seed=i), quality=90) for i in range(5)]
    path, fd, offsets, sizes, stamps = raw_file(tmp_path, jpgs)
    compose = T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip()])
    key = epoch_key(1, 2)
    try:
        # sample ids 0..4 of two sources: 0-3 in the raw file, 4 in a shard not open yet
        readable = np.array([1, 1, 0, 1, 1], np.uint8)  # sample 2: read per sample
        source = np.array([0, 0, 0, 0, 1], np.int32)
        fds = np.array([fd, -1], np.int32)
        by_source = np.concatenate([stamps[:1], stamps[:1]])
        checked = np.zeros(5, np.uint8)
        labels = np.array([10, 11, 12, 13, 14], np.int64)
        table = (readable, source, fds, offsets, sizes, by_source, checked, labels)
        order = np.array([9, 3, 9, 0, 9, 2, 9, 4, 9, 1], np.int64)  # the chunk: every other from 1
        out = np.zeros((6, 3, 20, 20), np.uint8)
        labels_out, ids_out = np.full(6, -1, np.int64), np.full(6, -1, np.int64)
        codes, reading, nbytes = native.run_chunk_at(order, 1, 2, 5, 1, table, compose.program, key, out,
                                                     labels_out, ids_out)
        assert codes is not None and reading > 0
        assert codes[:, 0].tolist() == [0, 0, native.RUN_GENERAL, native.RUN_UNOPENED, 0]
        assert nbytes == sizes[[3, 0, 1]].sum()
        assert labels_out.tolist() == [-1, 13, 10, -1, -1, 11] and ids_out.tolist() == [-1, 3, 0, -1, -1, 1]
        assert checked.tolist() == [1, 1, 0, 1, 0]
        for row, gid in ((1, 3), (2, 0), (5, 1)):
            window = compose.window(40, 50, Draws(1, 2, gid))
            expected = np.empty((3, 20, 20), np.uint8)
            native.crop_resize(jpgs[gid], window.box, expected, flip=window.flip)
            np.testing.assert_array_equal(out[row], expected)
        assert not out[0].any() and not out[3].any() and not out[4].any()  # rows left alone
        # every row decoded: no codes to look at
        codes, _, _ = native.run_chunk_at(order, 1, 2, 2, 0, table, compose.program, key, out, labels_out, ids_out)
        assert codes is None
        with pytest.raises(ValueError, match="outside the order"):
            native.run_chunk_at(order, 1, 2, 6, 0, table, compose.program, key, out, labels_out, ids_out)
        with pytest.raises(ValueError, match="out of range"):  # order[0] is 9: no such sample
            native.run_chunk_at(order, 0, 1, 1, 0, table, compose.program, key, out, labels_out, ids_out)
        with pytest.raises(ValueError, match="rows are outside"):
            native.run_chunk_at(order, 1, 2, 2, 5, table, compose.program, key, out, labels_out, ids_out)
        with pytest.raises(ValueError, match="disagree"):
            native.run_chunk_at(order, 1, 2, 2, 0, (*table[:7], labels[:4]), compose.program, key, out,
                                labels_out, ids_out)
        with pytest.raises(ValueError, match="writable"):
            native.run_chunk_at(order, 1, 2, 2, 0, table, compose.program, key, out, labels_out,
                                np.frombuffer(bytes(48), np.int64))
    finally:
        os.close(fd)


def test_read_chunk_at_takes_its_rows_from_the_order_and_the_tables(tmp_path):
    """read_chunk_at alone: sample ids from a strided order, the readable rows' bytes one
    after another in one buffer (those on a shard not open keep their place, unread),
    the file's bytes there, the buffer's size asked for first where it is short, scans
    checked where not known intact (the flags then set), the pixel limit, bounds errors."""
    good = [encode(photo(40, 50, seed=i), quality=90) for i in range(5)]
    damaged = ones_in_scan(encode(photo(40, 50, seed=9), quality=90), fraction=0.9)
    blobs = [*good, damaged]
    path, fd, offsets, sizes, stamps = raw_file(tmp_path, blobs)
    raw = path.read_bytes()
    try:
        # sample ids 0..5: 2 not readable by range, 4 on a source not open yet, 5 damaged
        readable = np.array([1, 1, 0, 1, 1, 1], np.uint8)
        source = np.array([0, 0, 0, 0, 1, 0], np.int32)
        fds = np.array([fd, -1], np.int32)
        by_source = np.concatenate([stamps[:1], stamps[:1]])
        checked = np.zeros(6, np.uint8)
        table = (readable, source, fds, offsets, sizes, by_source, checked, np.arange(6, dtype=np.int64))
        order = np.array([9, 3, 9, 0, 9, 2, 9, 4, 9, 1, 9, 5], np.int64)  # every other from 1
        gids = [3, 0, 2, 4, 1, 5]
        ours = sizes[gids] * readable[gids]
        head, place, total = native.read_chunk_at(order, 1, 2, 6, table, np.zeros(10, np.uint8))
        assert head is None and total == ours.sum() and not checked.any()  # too short: nothing read
        starts = np.concatenate([[0], np.cumsum(ours)[:-1]])
        assert place.tolist() == [[g, s, z] for g, s, z in zip(gids, starts.tolist(), ours.tolist())]
        buffer = np.zeros(total + 7, np.uint8)  # longer than needed: fine
        head, again, total = native.read_chunk_at(order, 1, 2, 6, table, buffer)
        assert head is not None and np.array_equal(again, place)
        assert head.tolist() == [[0, 40, 50], [0, 40, 50], [native.READ_GENERAL, 0, 0],
                                 [native.RUN_UNOPENED, 0, 0], [0, 40, 50], [native.READ_BAD, 40, 50]]
        for (gid, start, size), (status, _, _) in zip(place.tolist(), head.tolist()):
            expected = raw[offsets[gid]:offsets[gid] + size] if status != native.RUN_UNOPENED else bytes(size)
            assert bytes(buffer[start:start + size]) == expected
        assert checked.tolist() == [1, 1, 0, 1, 0, 0]  # read intact: flagged; 5 damaged; 4 not read
        fds[1] = fd  # the shard opened: the row is read at its place
        checked[5] = 1  # known intact (say the index's verdict): its scan is not checked again
        head, _, _ = native.read_chunk_at(order, 1, 2, 6, table, buffer)
        assert head is not None and head[:, 0].tolist() == [0, 0, native.READ_GENERAL, 0, 0, 0]
        assert bytes(buffer[:total]) == b"".join(raw[offsets[g]:offsets[g] + sizes[g]] for g in (3, 0, 4, 1, 5))
        assert checked.tolist() == [1, 1, 0, 1, 1, 1]
        head, _, _ = native.read_chunk_at(order, 1, 2, 6, table, buffer, max_pixels=40 * 50 - 1)
        assert head is not None and head[:, 0].tolist() == [native.READ_BAD] * 2 + [native.READ_GENERAL] + \
            [native.READ_BAD] * 3
        changed = by_source.copy()
        changed[1, 2] += 1  # source 1: another ctime, not the indexed file
        head, _, _ = native.read_chunk_at(order, 1, 2, 6, (*table[:5], changed, *table[6:]), buffer)
        assert head is not None and head[:, 0].tolist() == [0, 0, native.READ_GENERAL, native.READ_CHANGED, 0, 0]
        head, place, total = native.read_chunk_at(order, 1, 2, 0, table, np.zeros(0, np.uint8))
        assert head is not None and len(head) == len(place) == total == 0
        with pytest.raises(ValueError, match="outside the order"):
            native.read_chunk_at(order, 1, 2, 7, table, buffer)
        with pytest.raises(ValueError, match="outside the order"):
            native.read_chunk_at(order, 11, -2, 7, table, buffer)
        with pytest.raises(ValueError, match="out of range"):  # order[0] is 9: no such sample
            native.read_chunk_at(order, 0, 1, 1, table, buffer)
        with pytest.raises(ValueError, match="out of range"):  # a source past fds
            native.read_chunk_at(order, 1, 2, 1, (readable, np.full(6, 2, np.int32), *table[2:]), buffer)
        with pytest.raises(ValueError, match="disagree"):
            native.read_chunk_at(order, 1, 2, 2, (*table[:4], sizes[:5], *table[5:]), buffer)
        with pytest.raises(ValueError, match="buffer must be writable"):
            native.read_chunk_at(order, 1, 2, 2, table, np.frombuffer(bytes(len(buffer)), np.uint8))
        with pytest.raises(ValueError, match="checked must be writable"):
            native.read_chunk_at(order, 1, 2, 2, (*table[:6], np.frombuffer(bytes(6), np.uint8), table[7]), buffer)
        with pytest.raises(ValueError, match="int64"):
            native.read_chunk_at(order.astype(np.int32), 1, 2, 2, table, buffer)
    finally:
        os.close(fd)


def test_read_chunk_checks_scans_and_the_pixel_limit_where_asked(tmp_path):
    good = encode(photo(80, 60, seed=1), quality=90)
    _, fd, offsets, sizes, stamps = raw_file(tmp_path, [good, ones_in_scan(good, fraction=0.9), good])
    buf = np.zeros(int(sizes.sum()), np.uint8)
    try:
        def read(**kw):
            return native.read_chunk(np.full(3, fd, np.int32), offsets, sizes, stamps, buf, offsets, **kw)[:, 0]

        assert read().tolist() == [0, 0, 0]  # the header of the damaged one reads
        assert read(checks=np.array([1, 1, 1], bool)).tolist() == [0, native.READ_BAD, 0]
        assert read(checks=np.array([1, 0, 1], bool)).tolist() == [0, 0, 0]
        assert read(max_pixels=80 * 60 - 1).tolist() == [native.READ_BAD] * 3
        assert read(max_pixels=80 * 60).tolist() == [0, 0, 0]
    finally:
        os.close(fd)


def test_emulated_decode_waits_without_decoding(tmp_path):
    blob = encode(photo(40, 50), quality=90)
    _, fd, offsets, sizes, stamps = raw_file(tmp_path, [blob, blob])
    out = np.zeros((2, 3, 8, 8), np.uint8)
    try:
        codes, _ = native.run_chunk(np.full(2, fd, np.int32), offsets, sizes, stamps, np.arange(2),
                                    np.ones(2, bool), np.arange(2), T.Compose([T.RandomResizedCrop(8)]).program, 0,
                                    out, emulate_s=0.001)
    finally:
        os.close(fd)
    assert codes[:, 0].tolist() == [0, 0] and not out.any()  # waited, decoded nothing


def test_arguments_are_checked():
    out = np.zeros((1, 3, 8, 8), np.uint8)
    one = np.zeros(1, np.int64)
    program = T.Compose([T.RandomResizedCrop(8)]).program
    fds, stamps, checks = np.zeros(1, np.int32), np.zeros((1, 3), np.int64), np.zeros(1, bool)
    with pytest.raises(ValueError, match="row outside"):
        native.run_chunk(fds, one, one, stamps, one, checks, np.array([1]), program, 0, out)
    with pytest.raises(ValueError, match="stamps"):
        native.run_chunk(fds, one, one, np.zeros((1, 2), np.int64), one, checks, one, program, 0, out)
    with pytest.raises(ValueError, match="malformed"):
        native.run_chunk(fds, one, one, stamps, one, checks, one, program[:10], 0, out)
    with pytest.raises(ValueError, match="int32"):
        native.read_chunk(np.zeros(1, np.int64), one, one, stamps, np.zeros(4, np.uint8), one)


def test_gpu_feed_per_chunk_gives_the_per_sample_feed_batches(shards, monkeypatch):
    from turbofeed.engine.gpu_chunks import ChunkedGpuDecode
    from turbofeed.testing import CpuStandInDecoder

    kw = dict(batch_size=24, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(40), return_keys=True)
    assert isinstance(stage_of(turbofeed.DataLoader(shards, gpu_decode=CpuStandInDecoder(), **kw)), ChunkedGpuDecode)
    loader = turbofeed.DataLoader(shards, gpu_decode=CpuStandInDecoder(), **kw)  # no pass but the one counted
    got = epoch(loader)
    stats = loader.stats.as_dict()  # each chunk's read counted: its time and bytes
    images = sum(int(source.table.sizes.sum()) for source in turbofeed.io.IndexedDataset(shards).sources)
    assert stats["seconds"]["fetch"] > 0 and stats["bytes_read"] == images
    per_sample(monkeypatch)
    reference = turbofeed.DataLoader(shards, gpu_decode=CpuStandInDecoder(), **kw)
    assert not isinstance(stage_of(reference), ChunkedGpuDecode)
    same_batches(got, epoch(reference))


def test_gpu_feed_reads_each_chunk_in_one_native_call(shards, monkeypatch):
    """The GPU feed's chunk is one read_chunk_at call (two where it is larger than any
    before: the buffer's size asked first); read_chunk reads only the rows of shards not
    open yet, at their places; every image's exact bytes reach the decoder."""
    calls = {"at": 0, "rows": 0, "short": 0, "opening": 0}
    read_at, read = native.read_chunk_at, native.read_chunk

    def counting(*a, **k):
        head, place, total = read_at(*a, **k)
        calls["at"] += 1
        calls["rows"] += a[3] if head is not None else 0
        calls["short"] += head is None
        return head, place, total

    def opening(*a, **k):
        calls["opening"] += 1
        return read(*a, **k)

    monkeypatch.setattr(native, "read_chunk_at", counting)
    monkeypatch.setattr(native, "read_chunk", opening)
    headroom = chunk_reads.HEADROOM
    monkeypatch.setattr(chunk_reads, "HEADROOM", 0.5)  # a first guess too small: a second call
    decoder = TensorDecoder()
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=decoder)
    assert sum(len(labels) for _, labels in loader) == 120
    assert calls["rows"] == 120 and calls["at"] == 6 + calls["short"] and 1 <= calls["short"] <= 6
    assert 1 <= calls["opening"] <= 6  # the chunks that found a shard not open yet
    sent = [d for call in decoder.tensor_calls for d in call]
    assert len(sent) == 120 and set(sent) == members(shards)
    monkeypatch.setattr(chunk_reads, "HEADROOM", headroom)
    calls.update(at=0, rows=0, short=0, opening=0)
    assert sum(len(labels) for _, labels in loader) == 120  # every shard open, the buffers large enough
    assert calls == {"at": 6, "rows": 120, "short": 0, "opening": 0}


def gpu_fail_reads(monkeypatch, errnos: dict[int, int]) -> None:
    """fail_reads for the GPU feed's two native reads: row ``i`` of each chunk fails."""
    read, read_at = native.read_chunk, native.read_chunk_at

    def failed(head):
        head = head.copy()
        for row, code in errnos.items():
            head[row] = (native.READ_ERRNO, code, 0)
        return head

    def failing_at(*a, **k):
        head, place, total = read_at(*a, **k)
        return (None if head is None else failed(head)), place, total

    monkeypatch.setattr(native, "read_chunk", lambda *a, **k: failed(read(*a, **k)))
    monkeypatch.setattr(native, "read_chunk_at", failing_at)


@pytest.mark.parametrize("errnos, message", [({-1: errno.EIO}, "Input/output error"),
                                             ({1: errno.EIO, -1: errno.ENOSPC}, "Input/output error")])
@pytest.mark.parametrize("warm", [False, True])
def test_a_read_error_on_the_gpu_feed_is_a_storage_error_naming_the_shard(shards, monkeypatch, errnos, message,
                                                                         warm):
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1, transform=T.imagenet_train(32),
                                  gpu_decode=CpuStandInDecoder())
    if warm:
        list(loader)  # every shard open: each chunk is one read_chunk_at call
    gpu_fail_reads(monkeypatch, errnos)
    with pytest.raises(StorageError, match=rf"\.tar: read of \d+ bytes at offset \d+ failed: {message}"):
        list(loader)


def test_a_shard_replaced_during_a_gpu_feed_pass_raises(tmp_path):
    # many batches: the feed and the batch thread run a few ahead of the consumer, never to the end
    members_ = [(f"{i}.jpg", encode(photo(32, 32, seed=i % 8), quality=90)) for i in range(160)]
    path = write_tar(str(tmp_path / "s.tar"), members_)
    loader = turbofeed.DataLoader(path, batch_size=8, num_workers=1, prefetch=1, transform=T.imagenet_train(16),
                                  gpu_decode=CpuStandInDecoder())
    it = iter(loader)
    next(it)
    os.utime(path, ns=(1, 1))  # a change to the indexed file (its ctime and mtime move)
    with pytest.raises(StorageError, match="s.tar"):
        for _ in it:
            pass


def test_gpu_feed_per_chunk_keeps_bad_samples_from_the_decoder(tmp_path):
    from turbofeed.testing import CpuStandInDecoder

    class Recording(CpuStandInDecoder):
        seen: list[bytes] = []

        def decode(self, datas):
            self.seen += [bytes(d) for d in datas]
            return super().decode(datas)

    path, _ = bad_shard(tmp_path)
    decoder = Recording()
    loader = turbofeed.DataLoader(path, batch_size=10, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=decoder, on_error="skip", return_keys=True)
    keys = {k.rsplit("/", 1)[1] for _ in range(2) for _, _, ks in loader for k in ks}
    assert keys == {f"{i:02d}" for i in range(30)} - {"05", "09", "13"}
    assert not any(d.startswith(b"not an image") for d in decoder.seen)
    with open(path, "rb") as f:
        raw = f.read()
    damaged = ones_in_scan(encode(photo(63, 80, seed=3), quality=90))
    assert damaged in raw and damaged not in decoder.seen  # checked on the CPU first, never sent


def test_gpu_batches_are_decoded_one_ahead_on_their_own_thread(shards):
    """The batched decode runs on the stage's ahead thread, not the consumer's: batch k + 1
    is decoded while the consumer still holds batch k (its training step overlaps it)."""
    import threading

    from turbofeed.testing import CpuStandInDecoder

    calls: list[tuple[str, int]] = []

    class Recording(CpuStandInDecoder):
        def decode(self, datas):
            calls.append((threading.current_thread().name, len(datas)))
            return super().decode(datas)

    loader = turbofeed.DataLoader(shards, batch_size=20, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=Recording())
    it = iter(loader)
    assert it.engine.ahead is not None and it.engine.decode.info.ahead
    first = next(it)
    deadline = time.monotonic() + 30
    while len(calls) < 2 and time.monotonic() < deadline:  # batch 2 decodes without being asked
        time.sleep(0.01)
    assert len(calls) >= 2 and first[0].shape[0] == 20
    rest = list(it)
    assert len(rest) == 5 and all(name.startswith("turbofeed-decode.gpu-ahead") for name, _ in calls)
    assert sum(n for _, n in calls) == 120


def test_a_batch_is_resized_on_a_second_thread_while_the_next_one_decodes(shards, monkeypatch):
    """The two steps ahead of the consumer run on two threads: the resize of batch 1 waits
    (bounded) for the decode of batch 2 to start, which it can only see if the two overlap."""
    import threading

    from turbofeed.engine import gpu_chunks

    decoding: list[str] = []
    started_second = threading.Event()
    overlapped: list[bool] = []

    class Decoder(TensorDecoder):
        def decode_tensors(self, tensors):
            decoding.append(threading.current_thread().name)
            if len(decoding) == 2:
                started_second.set()
            return super().decode_tensors(tensors)

    resize = gpu_chunks.resize_joined

    def waiting_resize(*a, **k):
        if not overlapped:
            overlapped.append(started_second.wait(timeout=30))
            overlapped.append(threading.current_thread().name)
        return resize(*a, **k)

    monkeypatch.setattr(gpu_chunks, "resize_joined", waiting_resize)
    loader = turbofeed.DataLoader(shards, batch_size=20, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=Decoder())
    assert sum(len(labels) for _, labels in loader) == 120
    assert overlapped[0] is True
    assert set(decoding) == {"turbofeed-decode.gpu-ahead-0-0"} and overlapped[1] == "turbofeed-decode.gpu-ahead-1-0"


def test_an_error_in_the_ahead_batch_reaches_the_consumer_in_order(shards):
    from turbofeed.testing import CpuStandInDecoder

    class Failing(CpuStandInDecoder):
        count = 0

        def decode(self, datas):
            self.count += 1
            if self.count == 3:
                raise RuntimeError("the device fell over")
            return super().decode(datas)

    loader = turbofeed.DataLoader(shards, batch_size=20, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=Failing())
    it = iter(loader)
    got = [next(it), next(it)]
    with pytest.raises(RuntimeError, match="fell over"):
        next(it)
    assert len(got) == 2
    assert sum(len(labels) for _, labels in loader) == 120  # the next pass runs afresh


def test_a_gpu_loop_left_early_stops_its_batch_thread(shards):
    """break out of the loop and drop the iterator: the ahead thread (which holds the
    stream) and the feeding threads stop, as they do without it."""
    import gc
    import threading

    from turbofeed.testing import CpuStandInDecoder

    loader = turbofeed.DataLoader(shards, batch_size=10, num_workers=2, transform=T.imagenet_train(32),
                                  gpu_decode=CpuStandInDecoder())
    for _ in loader:
        break
    gc.collect()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("turbofeed-decode.gpu")]
        if not alive:
            break
        time.sleep(0.05)
    assert not alive


# -- the GPU path per chunk (engine/gpu_chunks.py): packs, one decoder call and one resize per batch

class TensorDecoder(CpuStandInDecoder):
    """A stand-in with ``decode_tensors``, as turbofeed's GpuDecoder has: it records what
    each call got, and refuses (None) the images ``refuse(data)`` names."""

    def __init__(self, refuse=lambda data: False) -> None:
        super().__init__()
        self.refuse = refuse
        self.tensor_calls: list[list[bytes]] = []
        self.byte_calls: list[list[bytes]] = []

    def decode(self, datas):
        self.byte_calls.append([bytes(d) for d in datas])
        return [None if self.refuse(bytes(d)) else image for d, image in zip(datas, super().decode(datas))]

    def decode_tensors(self, tensors):
        assert all(t.dtype == torch.uint8 and t.dim() == 1 for t in tensors)
        datas = [t.numpy().tobytes() for t in tensors]
        self.tensor_calls.append(datas)
        return [None if self.refuse(d) else image for d, image in zip(datas, CpuStandInDecoder.decode(self, datas))]


def members(shards: str) -> set[bytes]:
    """Every image's bytes in the shards."""
    import tarfile
    from pathlib import Path

    out = set()
    for path in sorted(Path(shards).glob("*.tar")):
        with tarfile.open(path) as tar:
            out |= {tar.extractfile(m).read() for m in tar if m.name.endswith(".jpg")}
    return out


KW = dict(batch_size=24, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(40), return_keys=True)


def test_packs_go_to_decode_tensors_in_one_call_per_batch_with_the_per_sample_batches(shards, monkeypatch):
    assert isinstance(stage_of(turbofeed.DataLoader(shards, gpu_decode=TensorDecoder(), **KW)), ChunkedGpuDecode)
    decoder = TensorDecoder()
    loader = turbofeed.DataLoader(shards, gpu_decode=decoder, **KW)  # no pass but the one counted
    got = epoch(loader)
    assert decoder.byte_calls == [] and len(decoder.tensor_calls) == len(got) == 5
    sent = [d for call in decoder.tensor_calls for d in call]
    assert len(sent) == 120 and set(sent) == members(shards)  # each image once, its exact bytes
    per_sample(monkeypatch)
    reference = turbofeed.DataLoader(shards, gpu_decode=CpuStandInDecoder(), **KW)
    assert not isinstance(stage_of(reference), ChunkedGpuDecode)
    same_batches(got, epoch(reference))


@pytest.mark.parametrize("tensors", [True, False])
def test_refused_images_are_decoded_on_the_cpu_in_their_places(shards, monkeypatch, tensors):
    """A third of the images refused by the GPU decoder: decoded on the CPU instead,
    counted, and the batches are the per-sample feed's with the same decoder."""
    def refuse(data: bytes) -> bool:
        return len(data) % 3 == 0

    decoder = TensorDecoder(refuse) if tensors else _BytesOnly(refuse)
    loader = turbofeed.DataLoader(shards, gpu_decode=decoder, **KW)
    got = epoch(loader)
    refused = sum(refuse(d) for d in members(shards))
    assert 10 < refused < 110 and loader.stats.errors["gpu_fallback"] == refused
    per_sample(monkeypatch)
    reference = turbofeed.DataLoader(shards, gpu_decode=_BytesOnly(refuse), **KW)
    want = epoch(reference)
    assert reference.stats.errors["gpu_fallback"] == refused
    same_batches(got, want)


class _BytesOnly(CpuStandInDecoder):
    def __init__(self, refuse) -> None:
        super().__init__()
        self.refuse = refuse

    def decode(self, datas):
        return [None if self.refuse(bytes(d)) else image for d, image in zip(datas, super().decode(datas))]


@pytest.mark.parametrize("on_error", ["replace", "skip"])
def test_per_sample_positions_and_bad_samples_join_the_packs_in_order(tmp_path, monkeypatch, on_error):
    """PNG and CMYK samples (the per-sample path), damaged and unreadable ones (the
    policy) among packed JPEGs: the per-sample feed's batches, bit for bit."""
    path, _ = bad_shard(tmp_path)
    kw = dict(batch_size=12, num_workers=2, shuffle=True, seed=4, transform=T.imagenet_train(32),
              on_error=on_error, return_keys=True)
    assert isinstance(stage_of(turbofeed.DataLoader(path, gpu_decode=TensorDecoder(), **kw)), ChunkedGpuDecode)
    loader = turbofeed.DataLoader(path, gpu_decode=TensorDecoder(), **kw)  # no pass but the one counted
    got = epoch(loader)
    per_sample(monkeypatch)
    reference = turbofeed.DataLoader(path, gpu_decode=CpuStandInDecoder(), **kw)
    same_batches(got, epoch(reference))
    assert dict(loader.stats.errors) == dict(reference.stats.errors)


def test_a_gpu_feed_pass_reuses_a_few_buffers_with_every_image_intact(shards):
    """A long pass on the GPU feed per chunk: far fewer buffers made than chunks read, and
    each decoder call got each image's exact bytes (a buffer reused before its batch
    was decoded would hand the decoder another chunk's bytes)."""
    decoder = TensorDecoder()
    loader = turbofeed.DataLoader(turbofeed.mix([turbofeed.Dataset(shards)], epoch_size=480), gpu_decode=decoder,
                                  batch_size=8, num_workers=2, shuffle=True, seed=5,
                                  transform=T.imagenet_train(32))
    it = iter(loader)
    stage = it.engine.decode
    assert isinstance(stage, ChunkedGpuDecode)
    batches = sum(1 for _ in it)
    assert batches == 60
    known = members(shards)
    sent = [d for call in decoder.tensor_calls for d in call]
    assert len(sent) == 480 and set(sent) <= known
    chunks = 60 * -(-8 // stage.info.per_task)
    assert stage.reader.buffers.made < chunks // 4
