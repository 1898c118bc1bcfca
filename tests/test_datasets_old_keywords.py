"""Data described once (#38 item 1): the loaders take a ``turbofeed.Dataset``, a ``mix`` or
paths; their old data keywords still load for one release, each call warning once with
the ``turbofeed.Dataset(...)``/``turbofeed.mix(...)`` line to write, on real tar shards."""

from __future__ import annotations

import copy
import inspect
import pickle
import warnings

import pytest
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.datasets import MIX_OPTIONS, OLD_LOADER_KEYWORDS, OPTIONS


def load(data, **kw):
    return turbofeed.DataLoader(data, batch_size=4, num_workers=1, transform=T.imagenet_eval(16), return_keys=True,
                                **kw)


def keys(loader) -> list[str]:
    return [k for batch in loader for k in batch[2]]


def test_dataloader_takes_at_most_36_parameters():
    """STYLE.md 13: the loader's constructor is about how batches are made, near torch's size."""
    params = [p for name, p in inspect.signature(turbofeed.DataLoader.__init__).parameters.items()
              if name != "self" and p.kind is not p.VAR_KEYWORD]
    assert len(params) <= 36, [p.name for p in params]
    described = {p.name for p in params} & {*OLD_LOADER_KEYWORDS, "dataset"}
    assert not described, f"data keywords left on the loader: {sorted(described)}"
    pipeline = set(inspect.signature(turbofeed.Pipeline.__init__).parameters)
    assert not pipeline & set(OLD_LOADER_KEYWORDS)


def test_the_old_keywords_are_one_list():
    assert OLD_LOADER_KEYWORDS == (*OPTIONS, *MIX_OPTIONS, "s3")


def test_an_old_keyword_loads_as_its_dataset_with_one_warning_naming_it(shards):
    new = keys(load(turbofeed.Dataset(shards, format="tar", index=False)))
    with pytest.warns(DeprecationWarning) as caught:
        old = load(shards, format="tar", index=False)
    assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line, not turbofeed's
    message = str(caught[0].message)
    assert message.startswith("DataLoader(): format=, index= describe the data: pass "
                              f"turbofeed.Dataset({shards!r}, format='tar', index=False) as the data instead")
    assert keys(old) == new and len(new) > 0


def test_the_mixing_keywords_name_a_mix_line(shards):
    with pytest.warns(DeprecationWarning, match=r"pass turbofeed\.mix\(\[turbofeed\.Dataset\('.*'\)\], "
                                                r"epoch_size=6, resample=True\) as the data") as caught:
        old = load(shards, epoch_size=6, resample=True, seed=2)
    assert len(caught) == 1
    new = load(turbofeed.mix([turbofeed.Dataset(shards)], epoch_size=6, resample=True), seed=2)
    assert keys(old) == keys(new) and len(keys(new)) == 6


def test_the_warning_redacts_credentials_in_urls(shards):
    url = "s3://KEY:SECRET@bucket/shard-{000..001}.tar?X-Amz-Signature=abc"
    with pytest.warns(DeprecationWarning) as caught, pytest.raises(Exception):
        load(url, format="tar", index=False)  # nothing to reach here: the warning comes first
    message = str(caught[0].message)
    assert "SECRET" not in message and "X-Amz-Signature" not in message and "@bucket/shard-{000..001}.tar" in message


def test_an_unknown_keyword_is_pythons_type_error(shards):
    with pytest.raises(TypeError, match=r"DataLoader.__init__\(\) got an unexpected keyword argument 'formt'"):
        load(shards, formt="tar")
    with pytest.raises(TypeError, match=r"Pipeline.__init__\(\) got an unexpected keyword argument 'weights'"):
        turbofeed.Pipeline(shards, weights=[1.0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'streaming'"):
        turbofeed.Pipeline(shards, streaming=False)


def test_a_keyword_and_a_description_holding_it_is_a_type_error_without_warning(shards):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(TypeError, match="got a Dataset and format='tar'.*turbofeed.Dataset"):
            load(turbofeed.Dataset(shards), format="tar")


def test_torch_s_dataset_name_is_data_without_warning(shards):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        loader = turbofeed.DataLoader(dataset=turbofeed.Dataset(shards, index=False), batch_size=4, num_workers=1,
                                      transform=T.imagenet_eval(16), return_keys=True)
        assert keys(loader) == keys(load(turbofeed.Dataset(shards, index=False)))
        assert keys(copy.deepcopy(loader)) == keys(loader)
    with pytest.raises(TypeError, match="data and dataset= name the same thing"):
        turbofeed.DataLoader(shards, dataset=shards)


def test_a_copy_of_a_loader_made_with_old_keywords_keeps_them_and_does_not_warn_again(shards):
    with pytest.warns(DeprecationWarning):
        loader = load(shards, index=False, format="tar", seed=5, shuffle=True)
    assert loader._arguments["data"] == turbofeed.Dataset(shards, index=False, format="tar")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for again in (pickle.loads(pickle.dumps(loader)), copy.deepcopy(loader)):
            loader.set_epoch(0), again.set_epoch(0)
            assert again._arguments["data"] == loader._arguments["data"] and keys(again) == keys(loader)


def test_the_pipeline_s_old_keywords_warn_once_from_the_caller_s_line(shards):
    for make in (turbofeed.Pipeline, turbofeed.DistributedPipeline):
        with pytest.warns(DeprecationWarning, match=r"Pipeline\(\): index= describes the data: pass "
                                                    r"turbofeed\.Dataset\(") as caught:
            pipe = make(shards, num_workers=1, index=False)
        assert len(caught) == 1 and caught[0].filename == __file__
        assert [s.key for s in pipe] == [s.key for s in turbofeed.Pipeline(turbofeed.Dataset(shards, index=False),
                                                                           num_workers=1)]

