"""A shard's part of the dataset index, built on arrays (io.dsindex.parts.shard_part,
io.dsindex.grouping) with the native extension's reads and without them, against the
per-sample path it replaced: the per-shard index's steps (``scan_members``,
``sample_rows``, ``label_of``, ``probe_size``, and the loaders' scan check
``decode.scan.check``) applied one sample at a time, as the index was built before.
Same arrays, same dtypes, same tables (in the same order), same header entry, for
shards whose grouping, labels, names and images are each odd in their own way (damaged
JPEGs too), for pax, GNU and cut shards (``tarfile``'s path), and for the benchmark's
shape of shard."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image
from builders import encode, photo, small_jpeg
from image_cases import cut_scan, junk_before_marker, ones_in_scan, textured

from turbofeed.decode import native, scan
from turbofeed.errors import ImageTooLarge
from turbofeed.io.columns import BAD, INT, NAME, NONE
from turbofeed.io.dsindex.parts import CHECK_PIXELS, ShardPart, local_part, narrow
from turbofeed.io.local.index import label_of, no_image, no_samples, sample_rows, scan_members
from turbofeed.io.local.tarscan import Window
from turbofeed.decode.probe import probe_size

PATHS = [False, True] if native.available() else [False]


def scan_verdict(data: bytes, size: int) -> int:
    """What a loader's first check of an image (``size`` bytes in its shard, ``data`` read)
    says, as the index records it (native.SCAN_*): none without the extension, for what is
    no JPEG, an image over the index's pixel limit, or one the file ends inside."""
    if not native.built() or len(data) < max(4, size) or data[:2] != b"\xff\xd8":
        return native.SCAN_UNKNOWN
    try:
        scan.check(data, max_pixels=CHECK_PIXELS)
    except ImageTooLarge:
        return native.SCAN_UNKNOWN
    except ValueError:
        return native.SCAN_DAMAGED
    return native.SCAN_INTACT


def per_sample_part(path: str) -> ShardPart:
    """The part as the index built it before: one sample at a time, in Python."""
    with open(path, "rb") as f:
        members, damage = scan_members(f, os.fstat(f.fileno()).st_size)
        pread, heads = Window(f.fileno()).pread, Window(f.fileno()).pread
        bad, keys, suffixes, names, exts = [], [], {}, {}, {}
        rows = {k: [] for k in ("suffix", "offset", "size", "kind", "value", "member_count", "height", "width",
                                "scan", "member_ext", "member_offset", "member_size")}
        for key, image, group, label_raw in sample_rows(members, pread):
            name, at, nbytes = ("", 0, 0) if image is None else members[image]
            keys.append(key.encode("utf-8", "surrogateescape"))
            rows["suffix"].append(suffixes.setdefault(name[len(key) + 1:], len(suffixes)))
            rows["offset"].append(at)
            rows["size"].append(nbytes)
            h, w = (0, 0) if image is None else probe_size(lambda n: heads(n, at), nbytes)
            rows["height"].append(h)
            rows["width"].append(w)
            rows["scan"].append(scan_verdict(pread(nbytes, at), nbytes) if h > 0 else native.SCAN_UNKNOWN)
            kind, value = NONE, 0
            if image is None:
                kind, problem = BAD, no_image(group)
            else:
                label, problem = label_of(label_raw, pread)
                if problem is not None:
                    kind = BAD
                elif isinstance(label, str):
                    kind, value = NAME, names.setdefault(label, len(names))
                elif label is not None:
                    kind, value = INT, label
            if problem is not None:
                bad.append([len(keys) - 1, problem])
            rows["kind"].append(kind)
            rows["value"].append(value)
            rows["member_count"].append(len(group))
            for ext, i in group.items():
                rows["member_ext"].append(exts.setdefault(ext, len(exts)))
                rows["member_offset"].append(members[i][1])
                rows["member_size"].append(members[i][2])
    damage = no_samples(damage, len(members), len(keys))
    entry = {"samples": len(keys), "members": len(rows["member_ext"]), "problems": [],
             "damage": None if damage is None else damage.as_list(), "bad": bad}
    return ShardPart(entry, b"".join(keys), np.fromiter(map(len, keys), np.int64, count=len(keys)),
                     suffixes=suffixes, names=names, exts=exts,
                     **{k: narrow(np.array(v, np.int64)) for k, v in rows.items()})


def assert_same(a: ShardPart, b: ShardPart) -> None:
    for field in dataclasses.fields(ShardPart):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), (field.name, x, y)
        elif field.name == "entry":
            assert {k: v for k, v in x.items() if k not in ("dev", "ino", "size", "mtime_ns", "ctime_ns")} == y
        else:
            assert x == y and (not isinstance(x, dict) or list(x) == list(y)), (field.name, x, y)


def write(path, members: list[tuple[bytes | str, bytes]], fmt=tarfile.USTAR_FORMAT, encoding="utf-8") -> str:
    with tarfile.open(path, "w", format=fmt, encoding=encoding) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return str(path)


def _jpeg(**kw) -> bytes:
    return encode(photo(30, 41, seed=2), **kw)


def _textured() -> bytes:
    return encode(Image.fromarray(textured(seed=4)), quality=90)


def _png() -> bytes:
    return encode(photo(12, 7), "PNG")


SHARDS = {
    "plain": [(f"k{i:03d}.jpg", small_jpeg(i)) for i in range(3)] + [("k000.cls", b"0"), ("k001.cls", b" 7\n")],
    # keys coming back later join their first group; a second copy of an extension (other case) is left out
    "interleaved keys": [("a.jpg", _jpeg()), ("b.jpg", small_jpeg(1)), ("a.cls", b"3"), ("b.txt", b"dog"),
                         ("a.JPG", small_jpeg(5)), ("b.Cls", b"4"), ("c.seg.png", _png()), ("a.json", b"{}")],
    # dots in folders, names without an extension or ending in a dot, a folder ending in a slash
    "names": [("d.x/k.y.jpg", _jpeg(progressive=True)), ("d.x/k.y.cls", b"1"), ("noext", b"x"),
              ("trail.", b"y"), ("dir/sub/", b""), ("dir/sub/z.PNG", _png()), (".hidden.jpg", small_jpeg(2)),
              ("dir/.cls", b"5"), ("dir/.jpg", small_jpeg(3))],
    # every kind of label: class names, JSON fields, bad ones, empty, and over 64 KiB
    "labels": [(f"s{i}.jpg", small_jpeg(i)) for i in range(12)] + [
        ("s0.cls", b"12"), ("s1.txt", b"cat"), ("s2.json", json.dumps({"label": "cow"}).encode()),
        ("s3.json", b'{"caption": "none"}'), ("s4.cls", b"abc"), ("s5.txt", b""), ("s6.json", b"[1"),
        ("s7.cls", b"9" * 30), ("s8.txt", b"caf\xe9"), ("s9.cls", b" " * 70_000 + b"42"),
        ("s10.cls", b"\xff" * 70_000), ("s11.txt", "é".encode() * 40_000)],
    # samples without an image member, some with a label that must not be read
    "no images": [("t0.txt", b"a caption"), ("t1.cls", b"zz"), ("t1.json", b"{}"), ("t2.jpg", small_jpeg(0)),
                  ("t3.bin", b"\0" * 10)],
    # images Pillow reads, images libjpeg-turbo cannot, a header past 16 KiB, no image at all
    "images": [("i0.jpg", _jpeg(subsampling=0)), ("i1.jpg", encode(photo(9, 5).convert("CMYK"))),
               ("i2.jpg", _jpeg()[:200]), ("i3.jpg", b"\xff\xd8\xff\xe0" + bytes(range(96))), ("i4.jpg", b""),
               ("i5.webp", encode(photo(6, 8), "WEBP")), ("i6.jpg", _jpeg(exif=b"Exif\0\0" + bytes(30_000))),
               ("i7.png", b"not a png"), ("i8.jpeg", encode(photo(8, 8).convert("L"))),
               ("i9.gif", encode(photo(4, 3), "GIF"))],
    # a scan cut short, a bad Huffman code, junk before a header marker (not damage), intact
    "damaged images": [("d0.jpg", cut_scan(_textured(), 0.85)), ("d1.jpg", ones_in_scan(_textured(), 0.9)),
                       ("d2.jpg", junk_before_marker(_textured())), ("d3.jpg", _textured())],
    "empty tar": [],
}


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("parts")
    files = {name: write(root / f"{name.replace(' ', '_')}.tar", members) for name, members in SHARDS.items()}
    # raw bytes that are no UTF-8 in a name (ustar holds bytes; read back with surrogateescape)
    files["latin-1 names"] = write(root / "latin1.tar", [("caf\xe9.jpg", small_jpeg(1)), ("caf\xe9.cls", b"2"),
                                                         ("na\xefve.txt", b"x")], encoding="latin-1")
    files["pax"] = write(root / "pax.tar", [("é" * 3 + ".jpg", small_jpeg(1)), ("é" * 3 + ".cls", b"2")],
                         fmt=tarfile.PAX_FORMAT)
    files["gnu long names"] = write(root / "gnu.tar", [("x" * 120 + ".jpg", small_jpeg(1)), ("x" * 120 + ".cls", b"2")],
                                    fmt=tarfile.GNU_FORMAT)
    plain = open(files["labels"], "rb").read()
    (root / "cut.tar").write_bytes(plain[:len(plain) // 2])
    files["cut"] = str(root / "cut.tar")
    (root / "appended.tar").write_bytes(plain[:-1024] + open(files["plain"], "rb").read()[:-1024]
                                        + open(files["plain"], "rb").read())  # second copies of names
    files["appended"] = str(root / "appended.tar")
    (root / "zero.tar").write_bytes(b"")
    files["zero bytes"] = str(root / "zero.tar")
    return files


@pytest.mark.parametrize("use_native", PATHS, ids=lambda on: "native" if on else "python")
@pytest.mark.parametrize("name", sorted(SHARDS) + ["latin-1 names", "pax", "gnu long names", "cut", "appended",
                                                   "zero bytes"])
def test_a_part_equals_the_per_sample_path(shard_files, name, use_native):
    expected = per_sample_part(shard_files[name])
    assert_same(local_part(shard_files[name], use_native=use_native), expected)
    if name == "labels":  # the cases really are there
        assert {k for k, _ in expected.entry["bad"]} == {4, 6, 7, 10}  # abc, bad JSON, over int64, not UTF-8
        assert set(expected.names) == {"cat", "cow", "caf\ufffd", "é" * 40_000}
    if name == "images":
        assert 0 < int((expected.height > 0).sum()) < len(expected.height)
        if native.built():  # intact JPEGs found intact (a cut one is not), the others not checked
            assert expected.scan.tolist() == [1, 1, 0, 0, 0, 0, 1, 0, 1, 0]
    if name == "damaged images" and native.built():
        assert expected.scan.tolist() == [2, 2, 0, 1]  # junk before a marker: no size read, not checked


def test_a_benchmark_shaped_shard_of_many_samples(tmp_path):
    """The bench's shape (fake 100-byte JPEGs, .cls labels) and real JPEGs, 3000 samples."""
    members = []
    for i in range(3000):
        image = small_jpeg(i % 7) if i % 3 else b"\xff\xd8\xff\xe0" + bytes(range(96))
        members += [(f"{i:09d}.jpg", image), (f"{i:09d}.cls", str(i % 1000).encode())]
    path = write(tmp_path / "many.tar", members)
    expected = per_sample_part(path)
    for use_native in PATHS:
        assert_same(local_part(path, use_native=use_native), expected)


@pytest.mark.skipif(not native.available(), reason="the native extension is not built")
def test_gather_reads_each_member_through_its_window_and_refuses_a_short_file(tmp_path):
    blob = bytes(np.random.default_rng(3).integers(0, 256, 3_000_000, dtype=np.uint8))
    path = tmp_path / "blob"
    path.write_bytes(blob)
    spans = [(0, 10), (5, 100_000), (2_500_000, 512), (20, 30), (2_999_990, 10), (1_200_000, 1_500_000), (7, 0)]
    fd = os.open(path, os.O_RDONLY)
    try:
        offsets, sizes = (np.array(v, np.int64) for v in zip(*spans))
        assert native.gather(fd, offsets, sizes) == b"".join(blob[o:o + n] for o, n in spans)
        with pytest.raises(OSError):
            native.gather(fd, np.array([2_999_990], np.int64), np.array([11], np.int64))
        with pytest.raises(ValueError, match="non-negative"):
            native.gather(fd, np.array([0], np.int64), np.array([-1], np.int64))
    finally:
        os.close(fd)
