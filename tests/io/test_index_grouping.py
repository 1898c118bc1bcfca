""":func:`turbofeed.io.dsindex.grouping.group` on the members of a real tar: the samples'
members, and ``-1`` for a sample with no image or no label member (its documented
marker), as ``turbofeed.io.table``'s per-sample rules give them."""

from __future__ import annotations

import os
import tarfile

import numpy as np
from builders import small_jpeg, write_tar

from turbofeed.io.dsindex.grouping import group
from turbofeed.io.local.members import MemberArrays, scan_arrays


def _scanned(path: str) -> tuple[MemberArrays, object]:
    """:func:`scan_arrays` of the tar at ``path``: its members and damage."""
    with open(path, "rb") as f:
        return scan_arrays(f, os.fstat(f.fileno()).st_size)


def test_group_marks_a_sample_without_image_or_label_with_minus_one(tmp_path):
    members = [("a.jpg", small_jpeg(1)), ("a.cls", b"3"), ("b.txt", b"a caption, no image"),
               ("c.PNG", b"not decoded here"), ("c.json", b'{"label": 1}'), ("c.jpg", small_jpeg(2)),
               ("d.npy", b"neither")]
    arrays, damage = _scanned(write_tar(tmp_path / "shard.tar", members))
    assert damage is None
    s = group(arrays)
    keys = np.split(np.frombuffer(s.key_blob, np.uint8), np.cumsum(s.key_len)[:-1])
    assert [bytes(k).decode() for k in keys] == ["a", "b", "c", "d"]
    assert s.count.tolist() == [2, 1, 3, 1]
    assert s.rows.tolist() == [0, 1, 2, 3, 4, 5, 6]
    # c's image is its jpg (member 5), not the PNG stored before it: "jpg" comes first in
    # IMAGE_EXTENSIONS, and the order of that tuple decides, not the members' order
    assert s.image.tolist() == [0, -1, 5, -1]
    assert s.label.tolist() == [1, 2, 4, -1]  # b's caption is its label member (.txt), d has none


def test_split_of_names_starting_with_a_dot_equals_split_key(tmp_path):
    """``MemberArrays.split`` against :func:`turbofeed.io.table.split_key`, name by name, on a
    real tar whose first member's name starts with a dot and has no slash (its key is empty:
    the search for the dot starts at the name's first byte), then dots after slashes."""
    from turbofeed.io.table import split_key

    names = [".jpg", ".cls", "a.b.jpg", "d.x/.hidden.png", "d.x/noext", "e/f.", ".x.y"]
    arrays, _ = _scanned(write_tar(tmp_path / "dots.tar", [(name, b"x") for name in names]))
    s = arrays.split
    blob = np.frombuffer(arrays.names, np.uint8)
    starts = np.concatenate([[0], arrays.name_end[:-1]])
    for i, name in enumerate(names):
        key, ext = split_key(name)
        got_key = bytes(blob[starts[i]:starts[i] + s.key_len[i]]).decode()
        assert (got_key, s.raw[s.raw_id[i]].decode().lower()) == (key, ext), name


def test_split_of_names_longer_than_the_matrix_width_equals_split_key(tmp_path):
    """Keys over 512 bytes (pax names: any length) are numbered with a dict, not the padded
    matrix: the same keys, samples and extensions as :func:`turbofeed.io.table.split_key`."""
    from turbofeed.io.table import split_key

    long = "k" * 600
    names = [f"{long}.jpg", "short.jpg", f"{long}.cls", f"d/{long}x.png", "short.cls"]
    arrays, _ = _scanned(write_tar(tmp_path / "pax.tar", [(name, b"x") for name in names], tarfile.PAX_FORMAT))
    s = arrays.split
    assert s.key_id.tolist() == [0, 1, 0, 2, 1] and s.key_first.tolist() == [0, 1, 3]
    assert [split_key(n)[0] for n in names] == [long, "short", long, f"d/{long}x", "short"]
    assert [s.raw[i].decode() for i in s.raw_id] == ["jpg", "jpg", "cls", "png", "cls"]
    assert group(arrays).count.tolist() == [2, 2, 1]
