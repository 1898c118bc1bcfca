"""io.local.tarscan: the fast header walk gives tarfile's members for every plain, whole
shard, and hands every other file (cut, corrupt, pax, GNU long names, links) to tarfile,
so the index of any file is the same whichever path read it."""

from __future__ import annotations

import io
import os
import random
import tarfile
from pathlib import Path

import pytest
from builders import small_jpeg, tar_bytes
from tar_compare import both_walks, scan_both

from turbofeed.io.local import index as index_module
from turbofeed.io.local.tarscan import Window


def _scan_both(path: str, monkeypatch) -> tuple:
    return scan_both(Path(path), monkeypatch)  # tarfile only, and the array scans checked on the way


def _shard() -> bytes:
    members = []
    for i in range(12):
        members += [(f"dir/k{i:03d}.jpg", small_jpeg(i)), (f"dir/k{i:03d}.cls", str(i).encode())]
    return tar_bytes(members)


def test_a_plain_shard_takes_the_fast_path_with_tarfile_members(tmp_path, monkeypatch):
    path = tmp_path / "s.tar"
    path.write_bytes(_shard())
    fd = os.open(path, os.O_RDONLY)
    try:
        found = both_walks(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    with tarfile.open(path) as tf:
        expected = [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]
    assert found == expected
    fast, slow = _scan_both(str(path), monkeypatch)
    assert fast == slow == (expected, None)


def test_cut_and_corrupt_copies_index_as_tarfile_says(tmp_path, monkeypatch):
    """Every cut offset class (inside a header, a payload, at a boundary, in the end
    blocks) and random byte flips inside headers: the same members and damage."""
    data = _shard()
    rng = random.Random(0)
    cuts = sorted({0, 1, 511, 512, 700, 1024, 1536, len(data) - 1024, len(data) - 512, len(data) - 1}
                  | {rng.randrange(len(data)) for _ in range(40)})
    variants = [data[:n] for n in cuts]
    for _ in range(60):
        damaged = bytearray(data)
        header = 512 * rng.randrange(len(data) // 512 - 2)
        damaged[header + rng.randrange(512)] = rng.randrange(256)
        variants.append(bytes(damaged))
    fast_taken = 0
    for k, variant in enumerate(variants):
        path = tmp_path / f"v{k}.tar"
        path.write_bytes(variant)
        fast, slow = _scan_both(str(path), monkeypatch)
        assert fast == slow, f"variant {k}"
        fd = os.open(path, os.O_RDONLY)
        fast_taken += both_walks(fd, len(variant)) is not None
        os.close(fd)
    assert fast_taken > 10  # flips in names and payload padding keep many files whole


@pytest.mark.parametrize("link", [False, True])
@pytest.mark.parametrize("fmt,name", [(tarfile.PAX_FORMAT, "é" * 3 + ".jpg"), (tarfile.GNU_FORMAT, "x" * 120 + ".jpg"),
                                      (tarfile.USTAR_FORMAT, "p" * 90 + "/" + "q" * 80 + ".jpg")])
def test_extended_headers_go_to_tarfile_or_agree(tmp_path, monkeypatch, fmt, name, link):
    """pax and GNU long names and links go to tarfile; a ustar name split into prefix and
    name is read by the fast walk the way tarfile joins it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for member, payload in ((name, small_jpeg(1)), ("k.cls", b"1")):
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        if link:
            symlink = tarfile.TarInfo("link.jpg")
            symlink.type, symlink.linkname = tarfile.SYMTYPE, "k.cls"
            tar.addfile(symlink)
    path = tmp_path / "x.tar"
    path.write_bytes(buf.getvalue())
    fast, slow = _scan_both(str(path), monkeypatch)
    assert fast == slow and [m[0] for m in fast[0]] == [name, "k.cls"]
    fd = os.open(path, os.O_RDONLY)
    walked = both_walks(fd, os.fstat(fd).st_size)
    os.close(fd)
    assert (walked is not None) == (fmt == tarfile.USTAR_FORMAT and not link)


def test_window_reads_exact_ranges_across_refills(tmp_path):
    blob = bytes(random.Random(1).randrange(256) for _ in range(300_000))
    path = tmp_path / "blob"
    path.write_bytes(blob)
    fd = os.open(path, os.O_RDONLY)
    try:
        w = Window(fd)
        for offset, size in [(0, 10), (5, 100_000), (250_000, 512), (20, 30), (299_990, 100)]:
            assert w.read(offset, size) == blob[offset:offset + size]
            assert w.pread(size, offset) == blob[offset:offset + size]
    finally:
        os.close(fd)
