"""The DALI reader's batches apply the DataLoader's bad-sample policy (one code path:
``engine.stream.fill_position``), each epoch one pass. No DALI needed: the callable DALI
calls is plain Python (``turbofeed.dali.batches``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import turbofeed

from builders import small_jpeg, write_tar
from turbofeed.dali.batches import DatasetBatches
from turbofeed.engine.choose import OpenedData
from turbofeed.errors import SampleError


def bad_label_shard(tmp_path) -> str:
    members = [(f"{i:03d}.jpg", small_jpeg(i)) for i in range(6)]
    members += [(f"{i:03d}.cls", b"%d" % i) for i in range(6) if i != 2] + [("002.cls", b"not-a-number")]
    return write_tar(str(tmp_path / "bad.tar"), sorted(members))


def epoch(batches: DatasetBatches, e: int) -> list[list[str]]:
    out = []
    for i in range(len(batches)):
        columns = batches(SimpleNamespace(epoch_idx=e, iteration=i))
        out.append([bytes(k).decode() for k in columns[-1]])
    return out


@pytest.mark.parametrize("on_error", ["skip", "replace", "raise"])
def test_each_policy_as_the_dataloader_applies_it(tmp_path, on_error):
    source = OpenedData.open(bad_label_shard(tmp_path), on_error=on_error, cache_dir=None, format=None,
                             format_options=None, storage=None, classes=None)
    batches = DatasetBatches(source, batch_size=3, shuffle=False, seed=0, shard_id=0, num_shards=1,
                             return_keys=True, threads=2)
    try:
        if on_error == "raise":
            with pytest.raises(SampleError, match="bad.tar/002"):
                epoch(batches, 0)
            return
        for e in (0, 1):
            keys = epoch(batches, e)
            if on_error == "skip":
                assert keys == [["bad.tar/000", "bad.tar/001"], ["bad.tar/003", "bad.tar/004", "bad.tar/005"]]
            else:
                assert keys == [["bad.tar/000", "bad.tar/001", "bad.tar/003"],
                                ["bad.tar/003", "bad.tar/004", "bad.tar/005"]]
        counts = source.stats.as_dict()
        assert counts["errors"] == {"fetch": 1}  # the sample is counted bad once, logged once
        assert counts["skipped" if on_error == "skip" else "replaced"] == 2  # once an epoch
        (tmp_path / "again").mkdir()
        loader = turbofeed.DataLoader(bad_label_shard(tmp_path / "again"),
                                      batch_size=3, num_workers=2, on_error=on_error)
        for _ in range(2):
            list(loader)
        theirs = loader.stats.as_dict()
        assert {k: theirs[k] for k in ("errors", "skipped", "replaced")} == \
            {k: counts[k] for k in ("errors", "skipped", "replaced")}  # as the DataLoader counts them
    finally:
        batches.close()
