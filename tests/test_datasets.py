"""Datasets as objects (#27 item 3): ``turbofeed.Dataset`` describes what the data is,
``turbofeed.mix`` mixes descriptions; DataLoader and Pipeline take them and give what the
path form with the same keywords gives, on real tar shards written here."""

from __future__ import annotations

import copy
import os
import pickle
import warnings
import zlib

import pytest
import torch
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T


def write_shards(folder, name: str, count: int, per_shard: int) -> str:
    """``count`` shards of ``per_shard`` samples: KEY.jpg, KEY.cls (0 for "a", 1 otherwise),
    KEY.txt (a caption naming the key)."""
    os.makedirs(folder, exist_ok=True)
    for s in range(count):
        members = []
        for i in range(per_shard):
            key = f"{name}{s}-{i:03d}"
            members += [(f"{key}.jpg", small_jpeg(zlib.crc32(key.encode()) % 10_000)),
                        (f"{key}.cls", b"0" if name == "a" else b"1"), (f"{key}.txt", f"photo {key}".encode())]
        write_tar(os.path.join(folder, f"{name}-{s:03d}.tar"), members)
    return str(folder)


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("objects")
    return write_shards(root / "a", "a", 4, 10), write_shards(root / "b", "b", 2, 10)  # 40 and 20 samples


def load(data, **kw):
    kw.setdefault("shuffle", True)
    return turbofeed.DataLoader(data, batch_size=8, num_workers=2, seed=3, transform=T.imagenet_eval(16), **kw)


def batches(loader) -> list:
    return [tuple(x.clone() if isinstance(x, torch.Tensor) else list(x) for x in b) for b in loader]


def same(x: list, y: list) -> bool:
    return len(x) == len(y) and all(
        all(torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q for p, q in zip(a, b)) for a, b in zip(x, y))


def test_a_dataset_object_gives_the_batches_of_the_path_form(two):
    a = two[0]
    by_path = batches(load(a, return_keys=True))  # a path is Dataset(path)
    by_object = batches(load(turbofeed.Dataset(a, index=False), return_keys=True))
    assert len(by_path) == 5 and same(by_path, by_object)
    # a list of paths, as a tuple inside the description, is the same data
    shards = sorted(os.path.join(a, n) for n in os.listdir(a) if n.endswith(".tar"))
    assert same(batches(load(turbofeed.Dataset(shards), return_keys=True)), by_path)


def test_a_streamed_dataset_streams_as_the_keyword_does(two):
    with pytest.warns(DeprecationWarning, match=r"pass turbofeed\.Dataset\(\[.*streaming=True\)"):
        by_keyword = load(list(two), streaming=True, return_keys=True)  # the old keyword, one release
    by_object = load(turbofeed.Dataset(list(two), streaming=True), return_keys=True)
    assert by_object.stream_layout is not None and by_object.state_dict()["plan"] == by_keyword.state_dict()["plan"]
    assert by_object.state_dict()["plan"] != load(list(two)).state_dict()["plan"]  # streaming changes the order
    assert same(batches(by_keyword), batches(by_object))


def test_a_dataset_with_fields_gives_the_fields(two):
    ds = turbofeed.Dataset(two[1], fields={"image": "jpg", "caption": "txt", "label": "cls"})
    loader = turbofeed.DataLoader(ds, batch_size=5, num_workers=2, transform=T.imagenet_eval(16))
    got = list(loader)
    assert len(got) == 4
    for batch in got:
        assert set(batch) >= {"image", "caption", "label", "__key__", "__url__"}
        assert batch["image"].shape == (5, 3, 16, 16)
        assert batch["caption"] == [f"photo {k}" for k in batch["__key__"]]
        assert batch["label"].tolist() == [1] * 5


def test_a_mix_of_datasets_equals_the_parallel_lists(two):
    for kw in (dict(weights=[1, 3], epoch_size=40), dict(weights=[2, 1]), dict(epoch_size=24, resample=True), {}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if kw else "error", DeprecationWarning)  # the old keywords, one release
            old = load(list(two), return_keys=True, **kw)
        new = load(turbofeed.mix([turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1])], **kw), return_keys=True)
        assert len(old) == len(new)
        assert old.state_dict()["plan"] == new.state_dict()["plan"]  # the same draw, so states interchange
        for epoch in range(2):
            old.set_epoch(epoch)
            new.set_epoch(epoch)
            assert same(batches(old), batches(new)), (kw, epoch)


def test_a_mix_of_datasets_given_as_lists_keeps_each_dataset_whole(two):
    """A dataset of several paths is one entry of the mix: its weight covers all of them."""
    a_shards = sorted(os.path.join(two[0], n) for n in os.listdir(two[0]) if n.endswith(".tar"))
    mixed = load(turbofeed.mix([turbofeed.Dataset(a_shards), turbofeed.Dataset(two[1])], weights=[1, 3],
                               epoch_size=40), return_keys=True)
    keys = [k.rsplit("/", 1)[-1] for b in mixed for k in b[2]]
    assert sum(k[0] == "a" for k in keys) == 10 and sum(k[0] == "b" for k in keys) == 30
    with pytest.warns(DeprecationWarning, match=r"turbofeed\.mix\(\[turbofeed\.Dataset\(\["):
        nested = load([a_shards, two[1]], weights=[1, 3], epoch_size=40, return_keys=True)  # the old list form
    mixed.set_epoch(0)
    assert same(batches(nested), batches(mixed))


@pytest.mark.parametrize("name, value", [("format", "tar"), ("fields", {"image": "jpg"}), ("classes", ["x"]),
                                         ("cache_dir", "/tmp"), ("index", False), ("streaming", False),
                                         ("weights", [1.0])])
def test_a_dataset_and_a_data_argument_is_an_error_naming_it(two, name, value):
    with pytest.raises(TypeError, match=f"got a Dataset and {name}=.*pass turbofeed"):
        load(turbofeed.Dataset(two[0]), **{name: value})


@pytest.mark.parametrize("name, value", [("weights", [1, 1]), ("epoch_size", 10), ("resample", True),
                                         ("storage", turbofeed.S3Config())])
def test_a_mix_and_a_data_argument_is_an_error_naming_it(two, name, value):
    m = turbofeed.mix([turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1])])
    with pytest.raises(TypeError, match=f"got a Mix and {name}="):
        load(m, **{name: value})


def test_the_old_s3_keyword_still_loads_with_one_warning_and_both_together_raise(two):
    """``s3=`` is ``storage=``'s old name: on a loader, a data keyword, for one release."""
    config = turbofeed.S3Config(cache_max_bytes=1 << 30)
    new = load(turbofeed.Dataset(two[1], index=False, storage=config))
    with pytest.warns(DeprecationWarning, match=r"DataLoader\(\): index=, s3= describe the data: pass "
                                                r"turbofeed\.Dataset\(.*storage=S3Config\(") as caught:
        old = load(two[1], index=False, s3=config)
    assert len(caught) == 1
    assert same(batches(old), batches(new))
    assert pickle.loads(pickle.dumps(old))._arguments["data"].storage == config  # rebuilt from the Dataset
    with pytest.raises(TypeError, match="got both s3= and storage="):
        load(two[1], s3=config, storage=config)
    with pytest.warns(DeprecationWarning, match=r"Pipeline\(\): index=, s3= describe the data"):
        pipe = turbofeed.Pipeline(two[1], num_workers=1, index=False, s3=config)
    with pipe:
        assert len(pipe.next_batch(4)) == 4


def test_a_mix_whose_datasets_differ_says_it_is_not_supported(two):
    m = turbofeed.mix([turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1], fields={"image": "jpg"})], weights=[1, 1])
    with pytest.raises(NotImplementedError, match="differ in fields .*dataset 1"):
        load(m)
    m = turbofeed.mix([turbofeed.Dataset(two[0], format="tar"), turbofeed.Dataset(two[1])])
    with pytest.raises(NotImplementedError, match="differ in format"):
        turbofeed.Pipeline(m)


def test_mix_takes_only_datasets_and_checks_its_weights(two):
    ds = turbofeed.Dataset(two[0])
    with pytest.raises(TypeError, match=r"item 1 is a str, not a turbofeed.Dataset: wrap it"):
        turbofeed.mix([ds, two[1]])
    with pytest.raises(TypeError, match="item 0 is a Mix"):
        turbofeed.mix([turbofeed.mix([ds]), ds])
    with pytest.raises(TypeError, match="list of turbofeed.Dataset"):
        turbofeed.mix(ds)
    with pytest.raises(ValueError, match="one number per dataset"):
        turbofeed.mix([ds, ds], weights=[1])
    with pytest.raises(ValueError, match=r"weights\[1\] = -1"):
        turbofeed.mix([ds, ds], weights=[1, -1])
    with pytest.raises(ValueError, match="at least one"):
        turbofeed.mix([])
    with pytest.raises(ValueError, match="epoch_size"):
        turbofeed.mix([ds], epoch_size=0)


def test_dataset_arguments_are_checked_when_it_is_made():
    with pytest.raises(ValueError, match="format must be one of"):
        turbofeed.Dataset("x.tar", format="jpeg")
    with pytest.raises(ValueError, match="unknown format_options"):
        turbofeed.Dataset("x.h5", format_options={"imgs": "x"})
    with pytest.raises(TypeError, match="takes a path"):
        turbofeed.Dataset(42)
    with pytest.raises(TypeError, match="takes a path"):
        turbofeed.Dataset([])
    with pytest.raises(TypeError, match="storage must be"):
        turbofeed.Dataset("s3://b/p/", storage={"endpoint": "x"})
    with pytest.raises(TypeError, match="classes must be"):
        turbofeed.Dataset("x", classes="cat")
    with pytest.raises(ValueError, match="once"):
        turbofeed.Dataset("x", classes=["cat", "cat"])
    with pytest.raises(ValueError, match="decoders="):
        turbofeed.Dataset("x", decoders={"txt": str.upper})  # decoders go with fields
    with pytest.raises(TypeError, match=r"decoders\['txt'\] must be a callable"):
        turbofeed.Dataset("x", fields={"c": "txt"}, decoders={"txt": "upper"})
    with pytest.raises(TypeError, match="streaming"):
        turbofeed.Dataset("x", streaming="yes")
    with pytest.raises(TypeError, match="not a Dataset"):
        turbofeed.Dataset(turbofeed.Dataset("x"))
    # nothing is opened: a path that does not exist yet is a valid description
    assert turbofeed.Dataset("/nowhere/shard-{0..9}.tar").data == "/nowhere/shard-{0..9}.tar"


def test_a_dataset_pickles_copies_and_reads_back(two):
    ds = turbofeed.Dataset(two[0], fields={"image": "jpg", "caption": "txt"}, classes=["a", "b"], index=False,
                           storage=turbofeed.S3Config(endpoint_url="http://127.0.0.1:1"))
    back = pickle.loads(pickle.dumps(ds))
    assert back == ds and back is not ds and copy.deepcopy(ds) == ds
    assert repr(back) == repr(ds) and repr(ds).startswith(f"Dataset({two[0]!r}, storage=")
    m = turbofeed.mix([ds, back], weights=[1, 2], epoch_size=7)
    assert pickle.loads(pickle.dumps(m)) == m
    assert "weights=(1.0, 2.0), epoch_size=7" in repr(m)
    with pytest.raises(AttributeError):
        ds.format = "tar"  # a description does not change under a loader


def test_a_pipeline_takes_a_dataset(two):
    kw = dict(num_workers=2, shuffle=True, seed=1)
    by_path = [(s.key, s.label, s.get_image().tobytes()) for s in turbofeed.Pipeline(tar_paths=two[1], **kw)]
    ds = turbofeed.Dataset(two[1], fields={"image": "jpg", "caption": "txt"})
    pipe = turbofeed.Pipeline(ds, **kw)
    got = list(pipe)
    assert [(s.key, s.get_image().tobytes()) for s in got] == [(k, img) for k, _, img in by_path]
    assert all(s["caption"] == f"photo {s.key}" for s in got) and len(got) == 20
    # the concatenation of a mix; and what the Pipeline cannot do yet is said
    both = [s.key for s in turbofeed.Pipeline(turbofeed.mix([turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1])]))]
    assert both == [s.key for s in turbofeed.Pipeline(list(two))] and len(both) == 60
    with pytest.raises(NotImplementedError, match="Pipeline.*weights"):
        turbofeed.Pipeline(turbofeed.mix([turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1])], weights=[1, 1]))
    with pytest.raises(NotImplementedError, match="streaming=True"):
        turbofeed.Pipeline(turbofeed.Dataset(two[1], streaming=True))
    with pytest.raises(TypeError, match="got a Dataset and classes="):
        turbofeed.Pipeline(ds, classes=["a"])


def test_the_seed_documents_calls_keep_working(two):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # and warn of nothing
        loader = turbofeed.DataLoader(two[0], 8, 2, True, enable_distributed=False, drop_last=True)
        assert len(loader) == 5
        assert len(list(turbofeed.Pipeline(tar_paths=[two[0]]))) == 40


def test_a_dataset_s_classes_number_the_labels_as_the_keyword_does(image_folder):
    names = sorted(os.listdir(image_folder), reverse=True)  # not the sorted order the data would give
    kw = dict(batch_size=10, num_workers=2, transform=T.imagenet_eval(16), return_keys=True)
    with pytest.warns(DeprecationWarning, match="classes= describes the data"):  # the old keyword, one release
        by_keyword = [(b[1].tolist(), b[2]) for b in turbofeed.DataLoader(image_folder, classes=names, **kw)]
    by_object = [(b[1].tolist(), b[2]) for b in turbofeed.DataLoader(turbofeed.Dataset(image_folder, classes=names),
                                                                     **kw)]
    assert by_object == by_keyword
    labels = [x for b in by_keyword for x in b[0]]
    assert len(labels) == 30 and set(labels) == set(range(len(names)))


def test_a_description_is_keyword_only_after_the_data_and_cannot_change(two):
    import dataclasses

    for second in ("tar", ["cat", "dog"], {"jpg": bytes}):  # every option by name, whichever it would be
        with pytest.raises(TypeError, match="positional"):
            turbofeed.Dataset(two[0], second)
    with pytest.raises(TypeError, match="cache_dir must be a path"):
        turbofeed.Dataset(two[0], cache_dir=123)
    ds = turbofeed.Dataset(two[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.format = "tar"  # type: ignore[misc]
    mixed = turbofeed.mix([ds, ds])
    with pytest.raises(dataclasses.FrozenInstanceError):
        mixed.weights = (1.0, 2.0)  # type: ignore[misc]


def test_mix_weights_may_be_zero_or_fractions_but_not_all_zero(two):
    a, b = turbofeed.Dataset(two[0]), turbofeed.Dataset(two[1])
    assert turbofeed.mix([a, b], weights=[0.25, 0]).weights == (0.25, 0.0)
    with pytest.raises(ValueError, match="none is positive"):
        turbofeed.mix([a, b], weights=[0, 0])


def test_mix_of_a_path_string_says_it_takes_a_list(tmp_path):
    """mix("shards/") is the usual slip: the error says mix takes a list of Datasets, not
    that character 0 of the string is not a Dataset."""
    for wrong in (str(tmp_path), tmp_path, turbofeed.Dataset(str(tmp_path))):
        with pytest.raises(TypeError, match=r"mix\(\) takes a list of turbofeed.Dataset"):
            turbofeed.mix(wrong)


def test_mix_takes_an_epoch_size_of_one(tmp_path):
    """The smallest epoch is one sample: epoch_size=1 is taken, 0 refused."""
    one = turbofeed.Dataset(str(tmp_path))
    assert turbofeed.mix([one], epoch_size=1).epoch_size == 1
    with pytest.raises(ValueError, match="epoch_size must be a positive int"):
        turbofeed.mix([one], epoch_size=0)
