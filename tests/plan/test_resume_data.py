"""A resume state is bound to the data it was saved on: loading it into a loader over other
data with the same shard names and sample counts raises, naming the shard that differs;
the same data copied elsewhere (another directory, read through the dataset index or
through each shard's own index) resumes exactly."""

from __future__ import annotations

import json
import shutil

import pytest

import turbofeed
from builders import small_jpeg, write_tar
from resume_check import LOADER, check_resume
from turbofeed import transforms as T
from turbofeed.io.columns import StrColumn
from turbofeed.io.dsindex import build_index


def write_data(root, *, seed: int = 0, label_of=lambda s, i: i % 5) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for s in range(4):
        members = []
        for i in range(12):
            members += [(f"s{s}_{i:03d}.jpg", small_jpeg(seed=seed + s * 100 + i)),
                        (f"s{s}_{i:03d}.cls", str(label_of(s, i)).encode())]
        write_tar(str(root / f"shard-{s:06d}.tar"), members)
    return str(root)


def options() -> dict:
    return dict(batch_size=4, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_train(16), return_keys=True)


def saved_after(data: str, batches: int) -> dict:
    loader = turbofeed.DataLoader(data, **options())
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    it.close()
    return json.loads(json.dumps(state))  # as a checkpoint stores it


def test_a_state_from_other_data_with_the_same_shard_names_and_counts_is_refused(tmp_path):
    data = write_data(tmp_path / "a")
    other = write_data(tmp_path / "b")
    write_tar(str(tmp_path / "b" / "shard-000002.tar"),  # other images, same keys and count
              [m for i in range(12) for m in ((f"s2_{i:03d}.jpg", small_jpeg(seed=900 + i, size=40)),
                                               (f"s2_{i:03d}.cls", str(i % 5).encode()))])
    state = saved_after(data, 3)
    assert len(state["data"]) == 16 and state["data_samples"] == 48 and state["data_shards"] == 4
    loader = turbofeed.DataLoader(other, **options())
    with pytest.raises(ValueError, match=r"resume state is from other data: the state was saved on data with "
                                         rf"fingerprint {state['data']} \(48 samples in 4 shards\); this loader's "
                                         r"data is [0-9a-f]{16} \(48 samples in 4 shards\): shard-000002.tar "
                                         r"differ"):
        loader.load_state_dict(state)
    assert loader.state_dict()["epoch"] == 0  # nothing of the state was taken


def test_a_label_changed_in_place_with_the_same_size_is_other_data(tmp_path):
    data = write_data(tmp_path / "a")
    relabelled = write_data(tmp_path / "b", label_of=lambda s, i: 7 if (s, i) == (3, 4) else i % 5)
    with pytest.raises(ValueError, match=r"shard-000003.tar differ"):
        turbofeed.DataLoader(relabelled, **options()).load_state_dict(saved_after(data, 2))


def test_the_same_data_copied_elsewhere_resumes_exactly_with_or_without_the_dataset_index(tmp_path, per_shard):
    data = write_data(tmp_path / "here")
    for name, indexed in (("there", False), ("indexed", True)):
        copy = str(tmp_path / name)
        shutil.copytree(data, copy)
        if indexed:
            build_index(copy, cache_dir=str(tmp_path / "cache"), progress=False)

        def there() -> turbofeed.DataLoader:
            loader = turbofeed.DataLoader(turbofeed.Dataset(copy, cache_dir=str(tmp_path / "cache"), index=None if indexed else False),
                                          **options())
            assert isinstance(loader.dataset.sources[0].table.keys, StrColumn) == indexed  # the other representation
            return loader

        check_resume(lambda: turbofeed.DataLoader(data, **options()), then=there, stops=[5],
                     kind=LOADER.but(keys=lambda batch: list(zip(batch[1].tolist(), batch[2]))))  # labels and keys


def test_more_shards_than_parts_name_the_range_that_differs():
    from turbofeed.plan import DataPrint, check_data  # here: the other tests run on code without it

    names = tuple(f"shard-{k:06d}.tar" for k in range(200))
    bounds = DataPrint.part_bounds(200)
    assert len(bounds) == DataPrint.PARTS + 1 and bounds[0] == 0 and bounds[-1] == 200
    saved = DataPrint("0" * 16, 2000, names, tuple(f"{p:08x}" for p in range(DataPrint.PARTS)))
    now = DataPrint("1" * 16, 2000, names, tuple(f"{p + (p == 10):08x}" for p in range(DataPrint.PARTS)))
    a, b = bounds[10], bounds[11] - 1
    with pytest.raises(ValueError, match=rf"one of shard-{a:06d}.tar .. shard-{b:06d}.tar differ"):
        check_data(saved.state(), now)
    check_data(saved.state(), saved)  # the same data: no error
    fewer = DataPrint("2" * 16, 1990, names[:199], now.parts)
    with pytest.raises(ValueError, match=r"\(2000 samples in 200 shards\); this loader's data is 2{16} "
                                         r"\(1990 samples in 199 shards\)$"):
        check_data(saved.state(), fewer)
