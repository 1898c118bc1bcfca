"""General samples (``fields=``): any WebDataset member as a named field of dict batches,
paired with its image and key under shuffle, through every decode choice, with the
bad-sample policy, resume and distributed splits as for (images, labels) batches."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

import turbofeed
from builders import small_jpeg, write_tar
from resume_check import check_resume
from turbofeed import transforms as T
from turbofeed.decode import decode_mask
from turbofeed.errors import SampleError

SHARDS, PER_SHARD = 3, 20


def mask_png(seed: int) -> bytes:
    values = np.random.default_rng(seed).integers(0, 21, (32, 32), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(values, mode="L").save(out, format="PNG")
    return out.getvalue()


def caption(key: str) -> str:
    # numbers and words mixed: as labels this would be an error, as captions it is text
    return key if int(key[-2:]) % 2 else f"a photo numbered {key}"


@pytest.fixture(scope="module")
def laion(tmp_path_factory) -> str:
    """LAION/img2dataset-style shards: KEY.jpg, KEY.txt (caption), KEY.json (metadata),
    KEY.cls, KEY.seg.png (a class-index mask); every fifth sample has no .json."""
    root = tmp_path_factory.mktemp("laion")
    for s in range(SHARDS):
        members = []
        for i in range(PER_SHARD):
            key = f"{s}{i:04d}"
            members += [(f"{key}.jpg", small_jpeg(seed=s * 100 + i)), (f"{key}.txt", caption(key).encode()),
                        (f"{key}.cls", str(i % 7).encode()), (f"{key}.seg.png", mask_png(s * 100 + i))]
            if i % 5:
                members.append((f"{key}.json", json.dumps({"key": key, "width": 32}).encode()))
        write_tar(str(root / f"laion-{s:05d}.tar"), members)
    return str(root)


def all_keys() -> set[str]:
    return {f"{s}{i:04d}" for s in range(SHARDS) for i in range(PER_SHARD)}


FIELDS = {"image": "jpg;png", "caption": "txt", "meta": "json?", "label": "cls"}


def test_fields_are_paired_with_their_key_under_shuffle(laion):
    loader = turbofeed.DataLoader(turbofeed.Dataset(laion, fields=FIELDS), batch_size=8, num_workers=2, shuffle=True,
                                  seed=3,
                                  transform=T.imagenet_eval(16))
    seen = []
    for batch in loader:
        assert list(batch) == ["image", "caption", "meta", "label", "__key__", "__url__"]
        n = len(batch["__key__"])
        assert batch["image"].shape == (n, 3, 16, 16) and batch["image"].dtype == torch.uint8
        assert batch["label"].dtype == torch.int64 and batch["label"].shape == (n,)
        for key, text, meta, label, url in zip(batch["__key__"], batch["caption"], batch["meta"],
                                               batch["label"].tolist(), batch["__url__"]):
            assert text == caption(key) and label == int(key[-2:]) % 7 and url.endswith(f"laion-0000{key[0]}.tar")
            assert meta is None if int(key[1:]) % 5 == 0 else meta == {"key": key, "width": 32}
        seen += batch["__key__"]
    assert sorted(seen) == sorted(all_keys())  # every sample once, none lost for lacking a label


def test_the_image_field_is_the_same_pixels_as_the_classic_loader(laion):
    kw = dict(batch_size=8, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_train(16))
    classic = [(x, k) for x, _, k in turbofeed.DataLoader(laion, return_keys=True, **kw)]
    general = [(b["image"], b["__key__"]) for b in turbofeed.DataLoader(turbofeed.Dataset(laion, fields={"image": "jpg"}),
                                                                        **kw)]
    for (cx, ck), (gx, gk) in zip(classic, general, strict=True):
        assert [k.split("/")[1] for k in ck] == gk and torch.equal(cx, gx)


def test_masks_keep_their_class_indices(laion):
    loader = turbofeed.DataLoader(turbofeed.Dataset(laion, fields={"image": "jpg", "mask": "seg.png"}, decoders={"seg.png": decode_mask}),
                                  batch_size=10, num_workers=2, transform=T.imagenet_eval(16))
    for batch in loader:
        assert batch["mask"].shape == (10, 32, 32) and batch["mask"].dtype == torch.uint8
        for key, mask in zip(batch["__key__"], batch["mask"]):
            s, i = int(key[0]), int(key[1:])
            expected = np.random.default_rng(s * 100 + i).integers(0, 21, (32, 32), dtype=np.uint8)
            assert np.array_equal(mask.numpy(), expected)


@pytest.mark.parametrize("on_error", ["replace", "skip", "raise"])
def test_a_missing_required_field_is_a_bad_sample(laion, on_error):
    loader = turbofeed.DataLoader(turbofeed.Dataset(laion, fields={"image": "jpg", "meta": "json"}), batch_size=10,
                                  num_workers=2, on_error=on_error, transform=T.imagenet_eval(16))
    if on_error == "raise":
        with pytest.raises(SampleError, match=r"fetch: .*laion-00000\.tar/00000: no json member for field 'meta'"):
            list(loader)
        return
    batches = list(loader)
    keys = [k for b in batches for k in b["__key__"]]
    assert all(int(k[1:]) % 5 for k in keys)  # no sample without its metadata
    assert loader.stats.errors["fetch"] == 12  # 4 per shard, each counted once
    if on_error == "replace":
        assert [len(b["__key__"]) for b in batches] == [10] * 6
    else:
        assert sum(len(b["__key__"]) for b in batches) == 48


def test_a_field_that_cannot_be_decoded_names_its_sample_and_field(tmp_path):
    members = [("a.jpg", small_jpeg(1)), ("a.json", b'{"ok": 1}'), ("b.jpg", small_jpeg(2)), ("b.json", b"{not json")]
    path = write_tar(str(tmp_path / "bad.tar"), members)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "meta": "json"}), batch_size=2,
                                  num_workers=1, on_error="raise", transform=T.imagenet_eval(16))
    with pytest.raises(SampleError, match=r"bad\.tar/b: field 'meta': json member is not valid JSON"):
        list(loader)


def test_fields_without_an_image_and_through_the_pipeline(laion):
    loader = turbofeed.DataLoader(turbofeed.Dataset(laion, fields={"caption": "txt", "label": "cls"}), batch_size=16,
                                  num_workers=2)
    batch = next(iter(loader))
    assert "image" not in batch and batch["caption"] == [caption(k) for k in batch["__key__"]]
    pipe = turbofeed.Pipeline(turbofeed.Dataset(laion, fields={"image": "jpg", "caption": "txt"}), num_workers=2,
                              shuffle=True)
    samples = list(pipe)
    assert sorted(s.key for s in samples) == sorted(all_keys())
    assert all(s["caption"] == caption(s.key) and s["image"].shape == (32, 32, 3) for s in samples)
    with pytest.raises(KeyError, match="has no field 'meta'"):
        samples[0]["meta"]


def test_the_first_listed_extension_wins(tmp_path):
    gray = io.BytesIO()
    Image.fromarray(np.full((20, 24, 3), 7, np.uint8)).save(gray, format="PNG")
    path = write_tar(str(tmp_path / "both.tar"), [("k.jpg", small_jpeg(3)), ("k.png", gray.getvalue())])
    png_first = next(iter(turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "png;jpg"}), batch_size=1,
                                               num_workers=1,
                                               transform=T.Compose([T.Resize((20, 24))]))))
    assert png_first["image"].shape == (1, 3, 20, 24) and int(png_first["image"].max()) == 7


def test_resume_with_dict_batches_is_exact(laion):
    kw = dict(batch_size=6, num_workers=2, shuffle=True, seed=9, transform=T.imagenet_train(16))
    data = turbofeed.Dataset(laion, fields={"image": "jpg", "caption": "txt"})
    result = check_resume(lambda: turbofeed.DataLoader(data, **kw), stops=[4])  # keys: batch["__key__"]
    (run,) = result.runs
    assert len(run.tail) == len(result.steps) - 4
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(run.steps, result.steps))


def test_distributed_ranks_split_dict_batches_without_overlap(laion):
    ranks = [turbofeed.DataLoader(turbofeed.Dataset(laion, fields={"caption": "txt"}), batch_size=7, num_workers=1,
                                  shuffle=True, seed=1, rank=r, world_size=2) for r in range(2)]
    keys = [[k for b in loader for k in b["__key__"]] for loader in ranks]
    assert len(ranks[0]) == len(ranks[1])  # equal steps
    assert not set(keys[0]) & set(keys[1]) and set(keys[0]) | set(keys[1]) == all_keys()


def blocks(seed: int, size: tuple[int, int] = (48, 64), block: int = 4) -> np.ndarray:
    """A class-index mask of ``block``-pixel squares (ids 0..20)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 21, (size[0] // block, size[1] // block), dtype=np.uint8)
    return np.repeat(np.repeat(ids, block, 0), block, 1)


def png_of(array: np.ndarray, format: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format=format, **({"quality": 100} if format == "JPEG" else {}))
    return out.getvalue()


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory) -> str:
    """Images whose pixels say where they are (red = 4 * column, green = 4 * row: linear
    ramps, which a bilinear resample keeps exact away from the borders) and two paired
    masks holding each pixel's column and row: KEY.png, KEY.mx.png, KEY.my.png."""
    root = tmp_path_factory.mktemp("seg")
    rows, cols = np.mgrid[0:48, 0:64].astype(np.uint8)
    image = np.stack([cols * 4, rows * 4, np.zeros_like(rows)], axis=2)
    members = []
    for i in range(24):
        members += [(f"s{i:03d}.png", png_of(image)), (f"s{i:03d}.jpg", png_of(image, "JPEG")),
                    (f"s{i:03d}.mx.png", png_of(cols)), (f"s{i:03d}.my.png", png_of(rows))]
    return write_tar(str(root / "seg.tar"), members)


@pytest.mark.parametrize("image, tolerance", [("png", 0.75), ("jpg", 1.0)])  # general and native decode
def test_a_paired_mask_gets_the_image_crop_and_flip_pixel_for_pixel(segmentation, image, tolerance):
    loader = turbofeed.DataLoader(turbofeed.Dataset(segmentation, fields={"image": image, "mx": "mx.png", "my": "my.png"}, decoders={"mx.png": decode_mask, "my.png": decode_mask}),
                                  batch_size=8, num_workers=2, shuffle=True, seed=2, paired=["mx", "my"],
                                  transform=[T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    checked = flipped = 0
    for batch in loader:
        assert batch["image"].shape == (8, 3, 24, 24) and batch["mx"].shape == batch["my"].shape == (8, 24, 24)
        for pixels, mx, my in zip(batch["image"].numpy().astype(float), batch["mx"].numpy(), batch["my"].numpy()):
            # the image's ramps give the source position each output pixel was sampled at;
            # the masks, the source pixel nearest-neighbour took: the same within half a pixel
            inside = (mx > 2) & (mx < 61) & (my > 2) & (my < 45)  # ramps clamp at the borders
            assert np.all(np.abs(pixels[0] / 4 - mx)[inside] <= tolerance)
            assert np.all(np.abs(pixels[1] / 4 - my)[inside] <= tolerance)
            checked += int(inside.sum())
            flipped += int(mx[0, 0] > mx[0, -1])
    assert checked > 24 * 24 * 24 // 4 and 0 < flipped < 24  # flips happened, and not always


def test_nearest_scales_the_window_to_a_mask_of_another_size():
    from turbofeed.transforms import Window, nearest

    full = blocks(5)
    half = full[::2, ::2]
    window = Window((5.5, 3.25, 50.0, 40.5), 17, 23, flip=True)
    assert np.array_equal(nearest(half, window, full.shape), nearest(full, window, full.shape))


def test_paired_needs_a_field_an_image_and_a_transform(segmentation):
    with pytest.raises(ValueError, match="'depth' is not one of the fields"):
        turbofeed.DataLoader(turbofeed.Dataset(segmentation, fields={"image": "png", "mask": "seg.png"}),
                             paired=["depth"],
                             transform=T.imagenet_eval(16))
    with pytest.raises(ValueError, match="take the crop window of the 'image' field"):
        turbofeed.DataLoader(turbofeed.Dataset(segmentation, fields={"image": "png", "mask": "seg.png"}),
                             paired=["mask"])


def test_map_collate_and_classes_on_general_samples(tmp_path):
    members = []
    for i in range(12):
        members += [(f"k{i:02d}.jpg", small_jpeg(i)), (f"k{i:02d}.txt", ["cat", "dog", "eel"][i % 3].encode()),
                    (f"k{i:02d}.json", json.dumps({"w": i}).encode())]
    path = write_tar(str(tmp_path / "named.tar"), members)
    classes = ["eel", "dog", "cat"]

    def add_area(fields: dict) -> dict:
        assert fields["__key__"].startswith("k")
        return {**fields, "double": fields["meta"]["w"] * 2}

    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "label": "txt",
                                  "meta": "json"}, classes=classes), batch_size=6, num_workers=2, map=add_area, transform=T.imagenet_eval(16))
    for batch in loader:
        ids = [{"cat": 2, "dog": 1, "eel": 0}[["cat", "dog", "eel"][int(k[1:]) % 3]] for k in batch["__key__"]]
        assert batch["label"].tolist() == ids  # names mapped through classes=
        assert batch["double"].tolist() == [2 * w["w"] for w in batch["meta"]]  # what map added, collated
    samples = turbofeed.Pipeline(turbofeed.Dataset(path, fields={"meta": "json"}), num_workers=2, map=add_area)
    assert all(s["double"] == 2 * s["meta"]["w"] for s in samples)

    def pairs(samples: list[dict]) -> list[tuple]:
        return [(s["__key__"], tuple(s["image"].shape), s["meta"]["w"]) for s in samples]

    custom = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "meta": "json"}), batch_size=6,
                                  num_workers=2,
                                  collate=pairs, transform=T.imagenet_eval(16))
    out = [p for batch in custom for p in batch]
    assert sorted(out) == [(f"k{i:02d}", (3, 16, 16), i) for i in range(12)]
    assert custom.stats.samples == 12 and custom.stats.batches == 2  # counted whatever collate returns
    strict = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"label": "txt"}, classes=["cat", "dog"]),
                                  batch_size=6, num_workers=1, on_error="raise")
    with pytest.raises(SampleError, match="label 'eel' is not one of the 2 classes"):
        list(strict)
    with pytest.raises(ValueError, match="go with fields"):
        turbofeed.DataLoader(path, map=add_area)


def test_the_image_field_of_an_image_folder_is_its_file(image_folder):
    loader = turbofeed.DataLoader(turbofeed.Dataset(image_folder, fields={"image": "jpg;png"}), batch_size=4,
                                  num_workers=1,
                                  transform=T.imagenet_eval(16))
    batches = list(loader)
    assert sum(len(b["__key__"]) for b in batches) == loader.num_samples
    assert all(b["image"].shape[1:] == (3, 16, 16) for b in batches) and loader.stats.errors == {}
