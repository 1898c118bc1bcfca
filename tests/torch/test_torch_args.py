"""torch's own DataLoader arguments (issue 27): each is taken with its meaning or refused
with a one-line reason naming what to use; a loader pickles and deep-copies as its
configuration; two iterators of one loader run independently (a train loader reused for
validation mid-epoch, as Lightning's ``val_check_interval`` does)."""

from __future__ import annotations

import copy
import pickle
import threading
import time

import pytest
import torch
from torch.utils.data import default_collate

import turbofeed
from turbofeed import transforms as T

KW = dict(batch_size=8, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_eval(16), return_keys=True)
STEPS = 15  # 120 samples / 8


def loader_for(shards, **kw):
    return turbofeed.DataLoader(shards, **{**KW, **kw})


def keys_of(batches) -> list[str]:
    return [k for *_, keys in batches for k in keys]


def same_batches(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2] for a, b in zip(got, want))


def turbofeed_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("turbofeed-decode")]


# -- accepted with their meaning -----------------------------------------------------------
def test_dataset_keyword_and_the_arguments_with_nothing_to_do(shards):
    loader = turbofeed.DataLoader(dataset=shards, batch_size=8, shuffle=None, persistent_workers=True,
                                  in_order=False, pin_memory_device="", timeout=0, worker_init_fn=None,
                                  multiprocessing_context=None, sampler=None, batch_sampler=None,
                                  transform=T.imagenet_eval(16), return_keys=True)
    assert loader.shuffle is False  # torch's default None
    assert keys_of(list(loader)) == keys_of(list(loader_for(shards, shuffle=False)))
    assert (loader.timeout, loader.in_order, loader.worker_init_fn, loader.pin_memory_device) == (0, True, None, "")
    with pytest.raises(TypeError, match="data and dataset= name the same thing"):
        turbofeed.DataLoader(shards, dataset=shards)
    with pytest.raises(TypeError, match="no data"):
        turbofeed.DataLoader(batch_size=8)


def test_prefetch_factor_is_batches_decoded_ahead(shards):
    assert loader_for(shards, prefetch_factor=5).prefetch == 5
    assert loader_for(shards, prefetch_factor=3, prefetch=3).prefetch == 3
    with pytest.raises(ValueError, match="give one of them"):
        loader_for(shards, prefetch_factor=3, prefetch=4)
    with pytest.raises(ValueError, match="prefetch_factor must be an int >= 1"):
        loader_for(shards, prefetch_factor=0)


def test_generator_seeds_the_order(shards):
    g = torch.Generator()
    g.manual_seed(1234)
    by_generator = loader_for(shards, seed=0, generator=g)
    assert by_generator.seed == 1234 and by_generator.generator is g
    assert keys_of(list(by_generator)) == keys_of(list(loader_for(shards, seed=1234)))
    other = torch.Generator()
    other.manual_seed(99)
    assert keys_of(list(loader_for(shards, seed=0, generator=other))) != keys_of(list(loader_for(shards, seed=1234)))
    with pytest.raises(ValueError, match="both seed the order"):
        loader_for(shards, seed=7, generator=g)


def test_collate_fn_gets_image_label_pairs_as_torch_gives_them(shards):
    got: list = []

    def pairs(samples):
        got.append(samples)
        return default_collate(samples)

    plain = list(loader_for(shards, return_keys=False))
    collated = list(loader_for(shards, return_keys=False, collate_fn=pairs))
    assert len(collated) == len(plain) == STEPS
    for (a, b), (c, d) in zip(collated, plain):
        assert torch.equal(a, c) and torch.equal(b, d)
    image, label = got[0][0]
    assert tuple(image.shape) == (3, 16, 16) and isinstance(label, int)


def test_return_keys_with_collate_fn_gives_the_batch_and_its_keys(shards):
    """The keys were appended to whatever collate_fn returned: a stacked tensor was
    unpacked along its first dimension, a dict lost its keys (issue 37 #4)."""
    want = list(loader_for(shards))  # (images, labels, keys)

    def stacked(samples):
        return torch.stack([image for image, _ in samples])

    got = list(loader_for(shards, collate_fn=stacked))
    assert len(got) == STEPS
    for (images, keys), (images_0, _, keys_0) in zip(got, want):
        assert torch.equal(images, images_0) and keys == keys_0 and len(keys) == 8
    listed, keys = next(iter(loader_for(shards, collate_fn=lambda s: [*default_collate(s), len(s)])))
    assert len(listed) == 3 and listed[2] == 8 and keys == want[0][2]  # a list comes whole, not spread

    def as_dict(samples):
        return {"images": torch.stack([image for image, _ in samples]), "n": len(samples)}

    batch = next(iter(loader_for(shards, collate_fn=as_dict)))
    assert sorted(batch) == ["__key__", "images", "n"] and batch["__key__"] == want[0][2]
    fields = turbofeed.DataLoader(turbofeed.Dataset(shards, fields={"image": "jpg", "label": "cls"}), batch_size=8,
                                  return_keys=True,
                                  transform=T.imagenet_eval(16), collate=lambda s: [x["__key__"] for x in s])
    batch, keys = next(iter(fields))
    assert len(keys) == 8 and batch == [k.split("/")[1] for k in keys]


def test_collate_fn_that_raises_is_user_code(shards):
    def broken(samples):
        raise KeyError("oops")

    with pytest.raises(turbofeed.UserCodeError, match="collate_fn=.*broken.*KeyError"):
        next(iter(loader_for(shards, return_keys=False, collate_fn=broken)))


def test_collate_fn_with_fields_is_collate(shards):
    def first_keys(samples):
        return [s["__key__"] for s in samples]

    loader = turbofeed.DataLoader(turbofeed.Dataset(shards, fields={"image": "jpg", "label": "cls"}), batch_size=4,
                                  transform=T.imagenet_eval(16), collate_fn=first_keys)
    batch = next(iter(loader))
    assert isinstance(batch, list) and len(batch) == 4 and all(isinstance(k, str) for k in batch)
    with pytest.raises(ValueError, match="give one of them"):
        turbofeed.DataLoader(turbofeed.Dataset(shards, fields={"image": "jpg"}), collate_fn=first_keys,
                             collate=first_keys)
    with pytest.raises(ValueError, match="collate= takes the sample dicts of fields="):
        turbofeed.DataLoader(shards, collate=first_keys)


def test_a_dataset_object_with_fields_and_collate_fn(shards):
    """``fields`` brought by a ``turbofeed.Dataset`` (given as torch's ``dataset=``) make
    ``collate_fn`` the collate of sample dicts, as when given to the loader."""
    def first_keys(samples):
        return [s["__key__"] for s in samples]

    ds = turbofeed.Dataset(shards, fields={"image": "jpg", "label": "cls"})
    loader = turbofeed.DataLoader(dataset=ds, batch_size=4, transform=T.imagenet_eval(16), collate_fn=first_keys)
    batch = next(iter(loader))
    assert isinstance(batch, list) and len(batch) == 4 and all(isinstance(k, str) for k in batch)
    assert next(iter(copy.deepcopy(loader))) == batch  # a local function: deepcopy, not pickle


def test_num_workers_0_decodes_in_the_consumers_thread(shards):
    before = turbofeed_threads()
    inline = loader_for(shards, num_workers=0)
    assert inline.num_workers == 0 and inline.num_threads == 0
    batches = list(inline)
    assert turbofeed_threads() == before  # no decode thread was started
    assert same_batches(batches, list(loader_for(shards)))


def test_timeout_raises_for_a_slow_batch_instead_of_hanging(shards):
    def slow(image):
        time.sleep(0.25)
        return image

    transform = T.Compose([T.Resize(16), T.CenterCrop(16), slow])
    for workers in (2, 0):  # 2 threads: raised while waiting; none: once this thread made the batch (2 s)
        loader = loader_for(shards, transform=transform, timeout=0.2, num_workers=workers, return_keys=False)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"batch 0 of the pass took longer than timeout=0.2 s"):
            next(iter(loader))
        assert time.monotonic() - started < 10
    ok = loader_for(shards, timeout=30)
    assert ok.timeout == 30 and len(list(ok)) == STEPS
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        loader_for(shards, timeout=-1)


# -- refused, saying what to use ------------------------------------------------------------
@pytest.mark.parametrize("name,value,use", [
    ("sampler", torch.utils.data.SequentialSampler(range(3)), "use shuffle= and seed="),
    ("batch_sampler", [[0, 1]], "use batch_size=, drop_last="),
    ("worker_init_fn", print, "no worker processes"),
    ("multiprocessing_context", "spawn", "decodes in threads"),
    ("pin_memory_device", "xpu", "use pin_memory=True"),
])
def test_arguments_without_a_meaning_are_refused_in_one_line(shards, name, value, use):
    with pytest.raises(ValueError) as info:
        loader_for(shards, **{name: value})
    message = str(info.value)
    assert f"{name}= is not supported" in message and use in message and "\n" not in message


def test_a_torch_dataset_or_batch_size_none_is_a_clear_error(shards):
    class Folder(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match=r"a torch Dataset object \(Folder\) cannot be loaded: .*pass the paths"):
        turbofeed.DataLoader(Folder(), batch_size=8)
    with pytest.raises(ValueError, match=r"batch_size=None .* use batch_size=1"):
        turbofeed.DataLoader(shards, batch_size=None)


# -- copies ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_a_copy_is_the_configuration_and_iterates_the_same_data(shards, how):
    loader = loader_for(shards)
    loader.set_epoch(3)
    it = iter(loader)
    head = [next(it) for _ in range(2)]  # live threads and lent slots are not copied
    clone = {"pickle": lambda x: pickle.loads(pickle.dumps(x)), "deepcopy": copy.deepcopy,
             "copy": copy.copy}[how](loader)
    assert clone is not loader and type(clone) is turbofeed.DataLoader
    assert (clone.batch_size, clone.seed, clone.shuffle, len(clone)) == (8, 5, True, STEPS)
    assert clone.state_dict()["epoch"] == 0  # starts fresh
    clone.set_epoch(3)
    assert same_batches(list(clone), head + list(it))
    assert same_batches(list(clone), list(loader))  # epoch 3 again in both


def test_a_copy_keeps_the_torch_arguments(shards):
    g = torch.Generator()
    g.manual_seed(11)
    loader = loader_for(shards, generator=g, seed=0, num_workers=0, timeout=20, prefetch_factor=4,
                        collate_fn=default_collate, return_keys=False)
    clone = pickle.loads(pickle.dumps(loader))
    assert (clone.seed, clone.num_threads, clone.timeout, clone.prefetch) == (11, 0, 20, 4)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(clone, loader))


# -- two live iterators ----------------------------------------------------------------------
def test_validation_mid_epoch_with_the_train_loader(shards):
    """Lightning's val_check_interval with the train loader as val loader: train pass A
    mid-epoch, a whole pass B, then A gives exactly the rest of its epoch; the state
    follows whichever pass delivered last, and resumes exactly."""
    reference = list(loader_for(shards))  # epoch 0, uninterrupted
    loader = loader_for(shards)
    train = iter(loader)
    head = [next(train) for _ in range(5)]
    val = list(loader)  # a whole pass meanwhile: epoch 1
    assert len(val) == STEPS and sorted(keys_of(val)) == sorted(keys_of(reference))
    assert loader.state_dict()["epoch"] == 2 and loader.state_dict()["batches_done"] == 0  # follows B
    sixth = next(train)
    state = loader.state_dict()  # follows A again
    assert (state["epoch"], state["batches_done"]) == (0, 6)
    rest = list(train)
    assert same_batches(head + [sixth] + rest, reference)
    assert loader.state_dict()["epoch"] == 1
    resumed = loader_for(shards)
    resumed.load_state_dict(state)
    assert same_batches(list(resumed), rest)


def test_two_interleaved_iterators_each_give_their_whole_epoch(shards):
    loader = loader_for(shards)
    loader.set_epoch(2)
    a, b = iter(loader), iter(loader)
    got_a, got_b = [], []
    for x, y in zip(a, b):
        got_a.append(x)
        got_b.append(y)
    reference = loader_for(shards)
    reference.set_epoch(2)
    want = list(reference)
    assert same_batches(got_a, want) and same_batches(got_b, want)


def test_lightning_val_check_interval_with_the_train_loader(shards, tmp_path):
    pytest.importorskip("lightning")
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 4)
            self.train_keys: list[str] = []
            self.val_keys: list[list[str]] = []

        def training_step(self, batch, batch_idx):
            images, labels, keys = batch
            self.train_keys.extend(keys)
            return self.net(images.float().mean(dim=(2, 3))).sum()

        def on_validation_epoch_start(self):
            self.val_keys.append([])

        def validation_step(self, batch, batch_idx):
            self.val_keys[-1].extend(batch[2])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loader = loader_for(shards)
    model = Recorder()
    L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
              num_sanity_val_steps=0, enable_checkpointing=False, default_root_dir=str(tmp_path), max_epochs=1,
              val_check_interval=5).fit(model, train_dataloaders=loader, val_dataloaders=loader)
    reference = loader_for(shards)
    reference.set_epoch(0)
    assert model.train_keys == keys_of(list(reference))  # the whole epoch, in order, nothing lost
    assert len(model.val_keys) == 3 and all(sorted(v) == sorted(model.train_keys) for v in model.val_keys)
