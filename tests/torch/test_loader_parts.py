"""The DataLoader holds its epoch book and its planner as objects (issue 38, item 3),
not as mixins: each part owns its state, and the parts hold the loader weakly, so a
loader nobody uses is freed at once, threads and files with it."""

from __future__ import annotations

import gc
import weakref

import turbofeed
from turbofeed.torch._compat import TorchDropIn
from turbofeed.torch._epochs import EpochBook
from turbofeed.torch._planning import LoaderPlanner


def test_the_book_and_the_planner_are_parts_not_bases(shards):
    loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1)
    assert type(loader).__bases__ == (TorchDropIn,)  # torch's attribute names stay on the loader itself
    assert isinstance(loader.book, EpochBook) and isinstance(loader.planner, LoaderPlanner)
    assert len(loader) == 3 and loader.planner.epoch_batches() == 3
    it = iter(loader)
    next(it)
    assert loader.book.live_passes() == [it] and loader.state_dict()["batches_done"] == 1
    it.close()
    loader.close()


def test_a_dropped_loader_is_freed_without_the_garbage_collector(shards):
    gc.disable()
    try:
        loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1)
        assert sum(len(labels) for _, labels in loader) == 120
        gone = weakref.ref(loader)
        del loader
        assert gone() is None  # no cycle through its book or planner keeps it
    finally:
        gc.enable()
