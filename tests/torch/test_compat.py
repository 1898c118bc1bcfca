"""Drop-in: code written for ``torch.utils.data.DataLoader`` (Accelerate, Lightning, plain
loops) reads the attributes it expects, and Accelerate's ``skip_first_batches`` skips
through turbofeed's exact resume (the skipped batches are never read or decoded)."""

from __future__ import annotations

import pytest
import torch

import turbofeed
from turbofeed import transforms as T

KW = dict(batch_size=8, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_train(24), return_keys=True)
STEPS = 15  # 120 samples / 8


def loader_for(shards, **kw):
    return turbofeed.DataLoader(shards, **{**KW, **kw})


def epoch_of(shards, epoch: int, **kw) -> list:
    loader = loader_for(shards, **kw)
    loader.set_epoch(epoch)
    return list(loader)


def same_batches(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2] for a, b in zip(got, want))


def keys_of(batches) -> list[str]:
    return [k for *_, keys in batches for k in keys]


# -- attributes --------------------------------------------------------------------------
def test_the_attributes_torch_code_reads(shards):
    loader = loader_for(shards, drop_last=True)
    assert (loader.batch_size, loader.drop_last, loader.shuffle) == (8, True, True)
    assert len(loader.dataset) == 120 == loader.num_samples  # the whole dataset, all ranks
    # torch's meaning: worker *processes* (turbofeed runs none; its threads are num_threads)
    assert loader.num_workers == 0 and loader.num_threads == 2
    assert loader.prefetch_factor is None and loader.persistent_workers is False
    assert loader.pin_memory is False  # CPU batches in pageable memory
    assert callable(loader.collate_fn)
    sampler, batch_sampler = loader.sampler, loader.batch_sampler
    assert len(sampler) == 120 and len(batch_sampler) == len(loader) == STEPS
    assert (batch_sampler.batch_size, batch_sampler.drop_last) == (8, True)
    assert batch_sampler.sampler is sampler is loader.sampler  # one object: set_epoch runs once


@pytest.mark.parametrize("rank,world_size", [(0, 1), (1, 2)])
def test_the_sampler_is_this_ranks_order_of_the_next_epoch(shards, rank, world_size):
    loader = loader_for(shards, rank=rank, world_size=world_size)
    loader.sampler.set_epoch(3)  # forwarded: what Lightning and DistributedSampler users call
    ids = list(loader.sampler)
    assert len(ids) == len(loader.sampler) == 120 // world_size
    names = [loader.dataset.describe(i) for i in ids]
    keys = [f"{shard.rsplit('/', 1)[-1]}/{key}" for shard, key in names]
    assert keys == keys_of(loader)  # the pass after set_epoch(3) runs that order
    assert loader.state_dict()["epoch"] == 4


def test_an_iter_that_yields_nothing_takes_no_epoch(shards):
    """As a torch sampler, whose order is drawn at the first batch: Lightning's
    ``iter(loader)`` check must not make its epoch 0 the loader's epoch 1."""
    loader = loader_for(shards)
    iter(loader)
    assert keys_of(loader) == keys_of(epoch_of(shards, 0))
    assert keys_of(loader) == keys_of(epoch_of(shards, 1))


def test_collate_fn_refuses_samples_it_did_not_fetch(shards):
    with pytest.raises(TypeError, match="collates its own batches"):
        loader_for(shards).collate_fn([(torch.zeros(3), 1)])


# -- Accelerate ---------------------------------------------------------------------------
@pytest.mark.parametrize("rank,world_size", [(0, 1), (1, 2)])
def test_accelerate_skip_first_batches_yields_the_rest_of_the_epoch(shards, rank, world_size):
    accelerate = pytest.importorskip("accelerate")
    full = epoch_of(shards, 2, rank=rank, world_size=world_size)
    resumed = loader_for(shards, rank=rank, world_size=world_size)  # the same 3 batches skipped by resume
    resumed.load_state_dict({**resumed.state_dict(), "epoch": 2, "batches_done": 3,
                             "samples_done": 3 * 8 * world_size})
    tail = list(resumed)

    loader = loader_for(shards, rank=rank, world_size=world_size)
    loader.set_epoch(2)
    skipped = accelerate.Accelerator(cpu=True).skip_first_batches(loader, 3)
    assert len(skipped) == len(full) - 3
    got = list(skipped)
    assert same_batches(got, full[3:]) and same_batches(got, tail)  # same pixels, labels, keys
    # Only the batches delivered were read (and so decoded): none of the 3 skipped.
    assert loader.stats.bytes_read == resumed.stats.bytes_read
    assert loader.stats.batches == len(full) - 3
    # Then the loader goes on with the next epoch, in full.
    loader.set_epoch(3)
    assert same_batches(list(loader), epoch_of(shards, 3, rank=rank, world_size=world_size))


def test_the_skipping_loader_keeps_the_resume_state_exact(shards):
    from accelerate.data_loader import skip_first_batches

    full = epoch_of(shards, 0)
    loader = loader_for(shards)
    it = iter(skip_first_batches(loader, 4))
    head = [next(it), next(it)]
    state = loader.state_dict()
    assert (state["epoch"], state["batches_done"]) == (0, 6)
    del it
    again = loader_for(shards)
    again.load_state_dict(state)
    assert same_batches(head + list(again), full[4:])


def test_iterating_the_skipping_loader_twice_skips_in_each_epoch(shards):
    from accelerate.data_loader import skip_first_batches

    loader = loader_for(shards)
    skipped = skip_first_batches(loader, 10)
    first, second = list(skipped), list(skipped)
    assert same_batches(first, epoch_of(shards, 0)[10:])
    assert same_batches(second, epoch_of(shards, 1)[10:])


def test_accelerate_prepare_returns_the_loader_and_checkpoints_its_position(shards, tmp_path):
    """turbofeed splits the data by rank itself: ``prepare`` must not re-shard or wrap it
    (it returns it as is); ``register_for_checkpointing`` saves its exact position."""
    from accelerate import Accelerator

    full = epoch_of(shards, 1)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = loader_for(shards)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader
    accelerator.register_for_checkpointing(loader)
    loader.set_epoch(1)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    accelerator.save_state(str(tmp_path / "ckpt"))
    del it

    restarted = Accelerator(cpu=True)
    again = loader_for(shards)
    restarted.register_for_checkpointing(again)
    restarted.load_state(str(tmp_path / "ckpt"))
    again.set_epoch(1)  # the training loop's usual call keeps the resume point
    assert same_batches(head + list(again), full)


# -- Lightning ----------------------------------------------------------------------------
class _Recorder:
    """A LightningModule (built lazily: lightning is optional) that records the keys of
    every batch by epoch and never calls ``loader.set_epoch`` itself."""

    @staticmethod
    def make():
        import lightning as L

        class Recorder(L.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(3, 4)
                self.seen: dict[int, list[str]] = {}

            def training_step(self, batch, batch_idx):
                images, labels, keys = batch
                self.seen.setdefault(self.current_epoch, []).extend(keys)
                return self.net(images.float().mean(dim=(2, 3))).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        return Recorder()


def trainer(tmp_path, **kw):
    import lightning as L

    kw = {"enable_checkpointing": False, **kw}
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp_path), **kw)


def test_lightning_drives_the_epochs_through_the_sampler(shards, tmp_path):
    """Lightning calls ``loader.sampler.set_epoch(e)`` each epoch, so its epoch e is the
    loader's epoch e even though it peeks with ``iter(loader)`` before training."""
    pytest.importorskip("lightning")
    model = _Recorder.make()
    trainer(tmp_path, max_epochs=2).fit(model, train_dataloaders=loader_for(shards))
    assert model.seen == {e: keys_of(epoch_of(shards, e)) for e in (0, 1)}


def test_lightning_resumes_mid_epoch_from_a_checkpoint(shards, tmp_path):
    """Lightning stores ``loader.state_dict()`` in its checkpoints; a fit resumed from one
    taken mid-epoch continues that epoch where it stopped."""
    pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint

    first = _Recorder.make()
    every = ModelCheckpoint(dirpath=str(tmp_path), every_n_train_steps=STEPS + 6, save_top_k=-1)
    trainer(tmp_path, max_epochs=2, callbacks=[every], enable_checkpointing=True).fit(
        first, train_dataloaders=loader_for(shards))
    (ckpt,) = tmp_path.glob("*step=21.ckpt")  # after 6 steps of epoch 1
    second = _Recorder.make()
    trainer(tmp_path, max_epochs=2).fit(second, train_dataloaders=loader_for(shards), ckpt_path=str(ckpt))
    assert list(second.seen) == [1]
    assert first.seen[1][:6 * 8] + second.seen[1] == keys_of(epoch_of(shards, 1)) == first.seen[1]
