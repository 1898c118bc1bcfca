"""Batched crop/resize/flip/normalise as torch ops: the GPU augmentation, tested on the CPU."""

from __future__ import annotations

import random
import tarfile

import numpy as np
import pytest
import torch

from turbofeed import transforms as T
from turbofeed.decode import decode
from turbofeed.engine.gpu import resize_batch, resize_packed
from turbofeed.transforms.batched import (axis_weights, crop_to_reach, float_bytes, groups_within, pad_batch,
                                        resized_crop, window_tensors)


@pytest.fixture(scope="module")
def photos(shard_paths) -> list[np.ndarray]:
    with tarfile.open(shard_paths[0]) as tar:
        return [decode(tar.extractfile(m).read()) for m in tar.getmembers() if m.name.endswith(".jpg")][:12]


def cpu_reference(images, windows, output=None):
    """The CPU path: Pillow resample of each window, then flip and layout as write_slot does."""
    out = []
    for image, window in zip(images, windows):
        pixels = T.resample(image, window)
        dest = np.empty((3, window.height, window.width), np.uint8 if output is None else np.float32)
        T.write_slot(pixels, dest, flip=window.flip, channels_first=True, output=output)
        out.append(dest)
    return np.stack(out)


@pytest.mark.parametrize("transform", [T.imagenet_train(64), T.imagenet_eval(56), T.Compose([T.Resize((40, 70))])])
def test_matches_the_cpu_path_within_one_level(photos, transform):
    windows = [transform.window(p.shape[0], p.shape[1], T.Draws(7, 0, i)) for i, p in enumerate(photos)]
    batch, sizes = pad_batch([torch.from_numpy(p).permute(2, 0, 1) for p in photos])
    boxes, flips = window_tensors(windows)
    out = resized_crop(batch, sizes, boxes, transform.size, flips)
    ref = cpu_reference(photos, windows)
    diff = np.abs(out.numpy().astype(int) - ref.astype(int))
    # Pillow rounds to 8 bits between its two passes; the batched op keeps floats.
    assert out.dtype == torch.uint8 and diff.max() <= 1 and diff.mean() < 0.3, (diff.max(), diff.mean())


def test_normalised_output_and_channels_last(photos):
    transform = T.imagenet_train(48, normalize=True)
    windows = [transform.window(p.shape[0], p.shape[1], T.Draws(1, 0, i)) for i, p in enumerate(photos)]
    batch, sizes = pad_batch([torch.from_numpy(p).permute(2, 0, 1) for p in photos])
    boxes, flips = window_tensors(windows)
    out = resized_crop(batch, sizes, boxes, (48, 48), flips, transform.output, channels_last=True)
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    ref = cpu_reference(photos, windows, transform.output)
    # One 8-bit level is 1 / (255 * std) ~ 0.0175 after normalisation.
    assert np.abs(out.numpy() - ref).max() <= 1.01 / (255 * min(T.IMAGENET_STD))


def test_flip_mirrors_exactly():
    image = torch.arange(2 * 3 * 5 * 7, dtype=torch.float32).reshape(2, 3, 5, 7)
    sizes = torch.tensor([[5, 7], [5, 7]], dtype=torch.float32)
    boxes = torch.tensor([[0, 0, 7, 5], [0, 0, 7, 5]], dtype=torch.float32)
    plain = resized_crop(image, sizes, boxes, (5, 7), torch.tensor([False, False]), T.ToDtype(scale=False).spec)
    flipped = resized_crop(image, sizes, boxes, (5, 7), torch.tensor([False, True]), T.ToDtype(scale=False).spec)
    assert torch.equal(plain, image)  # identity box and size: pixels unchanged
    assert torch.equal(flipped[0], image[0]) and torch.equal(flipped[1], image[1].flip(-1))


def test_weights_are_normalised_and_stay_inside_each_image():
    w = axis_weights(torch.tensor([10.0, 4.0]), torch.tensor([0.0, 1.0]), torch.tensor([10.0, 3.0]), 5, 12)
    assert w.shape == (2, 5, 12)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5))
    assert torch.all(w[1, :, 4:] == 0)  # nothing from the padding beyond the second image


def test_peer_helpers_without_gpus_say_no():
    from turbofeed.torch.multi_gpu import MultiGpuTransfer

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert MultiGpuTransfer.can_access_peer(0, 1) is False
    with pytest.raises(ValueError, match="between GPUs"):
        MultiGpuTransfer.gpu_to_gpu(torch.zeros(3), "cuda:0")


def _windows(photos, transform, seed):
    return [transform.window(p.shape[0], p.shape[1], T.Draws(seed, 0, i)) for i, p in enumerate(photos)]


def test_resize_batch_cuts_images_to_what_their_windows_read_without_changing_pixels(photos):
    """resize_batch pads only the part of each image its window's filter reaches; the
    result equals resampling the whole padded images (float output: same sums up to
    float rounding; the CPU reference stays within one level)."""
    transform = T.Compose([T.RandomResizedCrop(48, scale=(0.02, 0.3)), T.RandomHorizontalFlip()])
    windows = _windows(photos, transform, 3)
    tensors = [torch.from_numpy(p).permute(2, 0, 1) for p in photos]
    exact = T.ToDtype(scale=False).spec
    whole, sizes = pad_batch(tensors)
    boxes, flips = window_tensors(windows)
    expected = resized_crop(whole, sizes, boxes, (48, 48), flips, exact)
    got = resize_batch(tensors, windows, (48, 48), exact)
    assert torch.allclose(got, expected, atol=1e-3)
    cut, _ = crop_to_reach(tensors[0], windows[0])
    assert cut.shape[1] * cut.shape[2] < tensors[0].shape[1] * tensors[0].shape[2]  # small crops: less to pad
    ref = cpu_reference(photos, windows)
    assert np.abs(resize_batch(tensors, windows, (48, 48), None).numpy().astype(int) - ref).max() <= 1


def test_a_small_budget_runs_the_batch_in_parts_with_the_same_pixels(photos):
    transform = T.imagenet_train(40, normalize=True)
    windows = _windows(photos, transform, 4)
    tensors = [torch.from_numpy(p).permute(2, 0, 1) for p in photos]
    shapes = [tuple(crop_to_reach(t, w)[0].shape[1:]) for t, w in zip(tensors, windows)]
    budget = float_bytes(3, *max(shapes), (40, 40))
    runs = groups_within(shapes, (40, 40), budget)
    assert len(runs) > 1 and [i for r in runs for i in r] == list(range(len(photos)))
    one = resize_batch(tensors, windows, (40, 40), transform.output, channels_last=True)
    parts = resize_batch(tensors, windows, (40, 40), transform.output, channels_last=True, budget=budget)
    assert parts.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(one, parts, atol=1e-5)


def test_groups_keep_every_run_within_the_budget_and_give_a_huge_image_its_own():
    shapes = [(300, 400)] * 5 + [(6000, 8000)] + [(300, 400)] * 5
    budget = 64 * 2**20
    runs = groups_within(shapes, (224, 224), budget)
    assert [i for r in runs for i in r] == list(range(len(shapes)))
    assert range(5, 6) in runs
    for r in runs:
        height = max(shapes[i][0] for i in r)
        width = max(shapes[i][1] for i in r)
        assert len(r) == 1 or float_bytes(len(r), height, width, (224, 224)) <= budget


def _per_image(pixels, windows, size, output, channels_last=False, budget=None):
    """resize_batch as it was built before it went batch-level: each image cut with
    crop_to_reach, the cuts padded by pad_batch, the tables from window_tensors."""
    cuts = [crop_to_reach(image, window) for image, window in zip(pixels, windows)]
    shapes = [(int(cut.shape[1]), int(cut.shape[2])) for cut, _ in cuts]
    parts = []
    for run in groups_within(shapes, size, budget):
        images, sizes = pad_batch([cuts[i][0] for i in run])
        boxes, flips = window_tensors([cuts[i][1] for i in run])
        parts.append(resized_crop(images, sizes, boxes, size, flips, output, channels_last))
    out = torch.cat(parts)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


@pytest.mark.parametrize("transform, budget, channels_last", [
    (T.imagenet_train(64), None, False),
    (T.imagenet_eval(56), None, True),
    (T.Compose([T.RandomResizedCrop(48, scale=(0.02, 0.3))]), None, False),  # no flip in the batch
    (T.imagenet_train(40, normalize=True), 3_000_000, True),  # several runs
])
def test_resize_batch_gives_the_bits_of_cutting_and_padding_image_by_image(photos, transform, budget,
                                                                           channels_last):
    windows = _windows(photos, transform, 11)
    tensors = [torch.from_numpy(p).permute(2, 0, 1) for p in photos]
    got = resize_batch(tensors, windows, transform.size, transform.output, channels_last, budget)
    expected = _per_image(tensors, windows, transform.size, transform.output, channels_last, budget)
    assert torch.equal(got, expected)
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last


def _tables(photos, windows):
    sizes = np.array([p.shape[:2] for p in photos], dtype=np.int64)
    table = np.array([(*w.box, w.height, w.width, w.flip) for w in windows], dtype=np.float64)
    return sizes, table


@pytest.mark.parametrize("transform, budget, channels_last", [
    (T.imagenet_train(64), None, False),
    (T.imagenet_eval(56), None, True),
    (T.Compose([T.RandomResizedCrop(48, scale=(0.02, 0.3))]), None, False),  # no flip in the batch
    (T.imagenet_train(40, normalize=True), 3_000_000, True),  # several runs
])
def test_resize_packed_gives_resize_batch_bits_from_one_gather(photos, transform, budget, channels_last):
    """Images joined in one buffer and their cuts gathered in one index op (past a cut:
    other pixels, weighted 0) give resize_batch's zero-padded result to the bit; the
    images here are HWC memory seen as CHW (nvImageCodec's layout) and CHW alike."""
    windows = _windows(photos, transform, 11)
    tensors = [torch.from_numpy(p).permute(2, 0, 1) if i % 2 else torch.from_numpy(p).permute(2, 0, 1).contiguous()
               for i, p in enumerate(photos)]
    sizes, table = _tables(photos, windows)
    expected = resize_batch(tensors, windows, transform.size, transform.output, channels_last, budget)
    got = resize_packed(tensors, sizes, table, transform.size, transform.output, channels_last, budget)
    assert torch.equal(got, expected)
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_resize_packed_takes_the_images_own_sizes_where_the_headers_were_wrong(photos, scale):
    """A decoder whose images are not the size the header said (smaller or larger):
    the images' own shapes decide the cuts, as resize_batch's do, and no read leaves
    the joined buffer (a window past a small image reads nothing)."""
    transform = T.imagenet_train(32)
    windows = _windows(photos, transform, 2)
    tensors = [torch.from_numpy(p).permute(2, 0, 1) for p in photos]
    sizes, table = _tables(photos, windows)
    said = np.maximum((sizes * scale).astype(np.int64), 1)
    expected = resize_batch(tensors, windows, transform.size, None)
    assert torch.equal(resize_packed(tensors, said, table, transform.size, None), expected)
    small = [t[:, :5, :7] for t in tensors]  # windows reach far past these images
    assert torch.equal(resize_packed(small, sizes, table, transform.size, None),
                       resize_batch(small, windows, transform.size, None))


def _groups_one_by_one(shapes, out_size, budget):
    """groups_within as it was written before it went NumPy: one image at a time."""
    groups, start, height, width = [], 0, 0, 0
    for i, (h, w) in enumerate(shapes):
        grown_h, grown_w = max(height, h), max(width, w)
        if i > start and float_bytes(i - start + 1, grown_h, grown_w, out_size) > budget:
            groups.append(range(start, i))
            start, grown_h, grown_w = i, h, w
        height, width = grown_h, grown_w
    if shapes:
        groups.append(range(start, len(shapes)))
    return groups


def test_groups_within_are_the_one_by_one_groups():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        shapes = rng.integers(0, 2000, (n, 2)).astype(np.int64)
        out = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
        budget = int(rng.integers(1, 2**31))
        pairs = [tuple(s) for s in shapes.tolist()]
        assert groups_within(shapes, out, budget) == groups_within(pairs, out, budget) \
            == _groups_one_by_one(pairs, out, budget)


def test_reaches_of_a_batch_are_each_windows_reach():
    from turbofeed.transforms.batched import reach, reaches

    rng = random.Random(5)
    boxes, outs, sizes, expected = [], [], [], []
    for _ in range(500):
        h, w = rng.randint(1, 900), rng.randint(1, 900)
        x0, y0 = rng.uniform(-3, w), rng.uniform(-3, h)
        box = (x0, y0, x0 + rng.uniform(0.5, w), y0 + rng.uniform(0.5, h))
        out = (rng.randint(1, 300), rng.randint(1, 300))
        boxes.append(box), outs.append(out), sizes.append((h, w))
        expected.append(reach(box, out, h, w))
    got = reaches(np.array(boxes), np.array(outs), np.array(sizes))
    assert got.tolist() == [list(r) for r in expected]
