""":func:`turbofeed.io.dsindex.grouping.group` on the members of a real tar: the samples'
members, and ``-1`` for a sample with no image or no label member (its documented
marker), as ``turbofeed.io.table``'s per-sample rules give them."""

from __future__ import annotations

import io
import tarfile

import numpy as np
from builders import small_jpeg

from turbofeed.io.dsindex.grouping import group
from turbofeed.io.local.members import scan_arrays


def test_group_marks_a_sample_without_image_or_label_with_minus_one(tmp_path):
    members = [("a.jpg", small_jpeg(1)), ("a.cls", b"3"), ("b.txt", b"a caption, no image"),
               ("c.PNG", b"not decoded here"), ("c.json", b'{"label": 1}'), ("c.jpg", small_jpeg(2)),
               ("d.npy", b"neither")]
    path = tmp_path / "shard.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with open(path, "rb") as f:
        arrays, damage = scan_arrays(f, path.stat().st_size)
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
