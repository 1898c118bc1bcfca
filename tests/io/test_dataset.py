"""io.dataset: several shards behind global sample ids 0 .. n-1, in shard order."""

from __future__ import annotations

import os
import shutil
import tarfile

from turbofeed.io import IndexedDataset


def test_global_ids_follow_shard_order(shards, shard_paths):
    """Global id g is the g-th image of the concatenated shards: same key, label and bytes
    as tarfile finds there."""
    ds = IndexedDataset(shards)
    expected = []
    for path in shard_paths:
        with tarfile.open(path) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".jpg"):
                    label = int(tf.extractfile(m.name[:-4] + ".cls").read())
                    expected.append((path, m.name[:-4], label, tf.extractfile(m).read()))
    assert len(ds) == len(expected) == 120
    assert ds.starts.tolist() == [0, 40, 80, 120]
    assert ds.labels.tolist() == [e[2] for e in expected]
    for g in (0, 39, 40, 79, 80, 119):
        assert ds.describe(g) == expected[g][:2]
        assert ds.read(g) == expected[g][3]
    ds.close()


def test_fingerprint_fields_ignore_where_the_copy_lives(shards, tmp_path):
    """Per-node copies at another path resume alike: only shard names and sizes count."""
    copy = tmp_path / "copy"
    shutil.copytree(shards, copy, ignore=shutil.ignore_patterns("*.tmp"))
    a, b = IndexedDataset(shards), IndexedDataset(str(copy))
    assert a.fingerprint_fields() == b.fingerprint_fields()
    os.remove(copy / "shard-000002.tar")
    assert IndexedDataset(str(copy)).fingerprint_fields() != a.fingerprint_fields()
