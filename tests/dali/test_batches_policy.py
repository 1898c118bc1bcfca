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


def test_each_batch_is_a_pure_function_of_epoch_and_iteration(shards, monkeypatch):
    """The batches come from the DataLoader's engine (one pass while DALI asks in order, a
    new one started at the batch asked where it jumps: a restored checkpoint), and are
    the same whichever order they are asked in."""
    from turbofeed.dali import batches as module
    from turbofeed.engine import build

    started = []
    real = build.build_pass

    def counting(options, plan, policy, **kw):
        started.append(kw.get("start", 0))
        return real(options, plan, policy, **kw)

    monkeypatch.setattr(module, "build_pass", counting)
    source = OpenedData.open(shards, on_error="replace", cache_dir=None, format=None, format_options=None,
                             storage=None, classes=None)
    batches = DatasetBatches(source, batch_size=16, shuffle=True, seed=4, shard_id=0, num_shards=1,
                             return_keys=True, threads=2)
    try:
        def keys(e: int, i: int) -> list[str]:
            return [bytes(k).decode() for k in batches(SimpleNamespace(epoch_idx=e, iteration=i))[-1]]

        in_order = [keys(1, i) for i in range(len(batches))]
        assert started == [0]  # one pass for the whole epoch
        assert keys(1, 5) == in_order[5] and keys(1, 2) == in_order[2] and keys(1, 3) == in_order[3]
        assert started == [0, 5, 2]  # a jump starts a pass there; the next batch in order does not
        assert sorted(k for b in in_order for k in b) == sorted(k for b in epoch(batches, 2) for k in b)
    finally:
        batches.close()
