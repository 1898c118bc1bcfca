"""Renamed keywords (turbofeed/base/renamed.py): ``s3=`` is now ``storage=`` (issue 38).
The old name still works for one release and warns once per call, naming the new one;
both together raise; every public function that takes ``storage=`` takes the old name."""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest

import turbofeed
from turbofeed.base.renamed import RENAMED, accepts_renamed
from turbofeed.io import S3Config, resolve

#: The public modules whose ``__all__`` may hold a taker of a renamed keyword.
PUBLIC = ["turbofeed", "turbofeed.io", "turbofeed.io.dsindex", "turbofeed.pipeline", "turbofeed.dali"]


def public_takers() -> dict[str, object]:
    """Every public function or class (its constructor) taking a keyword's new name."""
    found = {}
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            target = value.__init__ if isinstance(value, type) else value
            if not callable(target):
                continue
            try:
                params = inspect.signature(target).parameters
            except (TypeError, ValueError):
                continue
            if set(RENAMED.values()) & set(params):
                found[f"{module_name}.{name}"] = target
    return found


def test_the_old_name_works_and_warns_once_naming_the_new_one():
    config = S3Config(endpoint_url="http://127.0.0.1:1")
    with pytest.warns(DeprecationWarning, match=r"Dataset\(\): s3= is now storage=") as caught:
        old = turbofeed.Dataset("shard-{0..3}.tar", s3=config)
    assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line
    assert old == turbofeed.Dataset("shard-{0..3}.tar", storage=config) and old.storage is config
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        turbofeed.Dataset("shard-{0..3}.tar", storage=config)  # the new name: no warning


def test_both_names_together_raise():
    config = S3Config()
    with pytest.raises(TypeError, match=r"Dataset\(\) got both s3= and storage="):
        turbofeed.Dataset("shard-{0..3}.tar", s3=config, storage=config)
    with pytest.raises(TypeError, match=r"resolve\(\) got both s3= and storage="):
        resolve("s3://bucket/x.tar", s3=config, storage=config)


def test_every_public_taker_of_a_new_name_accepts_the_old_one():
    takers = public_takers()
    assert {"turbofeed.Dataset", "turbofeed.io.IndexedDataset", "turbofeed.dali.reader", "turbofeed.io.build_index",
            "turbofeed.io.resolve"} <= set(takers)
    # the loaders take no storage= (it is the Dataset's): s3= is one of their old data keywords there
    assert not {"turbofeed.DataLoader", "turbofeed.Pipeline"} & set(takers)
    for name, target in takers.items():
        params = inspect.signature(target).parameters
        assert not set(RENAMED) & set(params), f"{name} shows an old name in its signature"
        assert hasattr(target, "__wrapped__"), f"{name} takes storage= but not s3=: wrap it with accepts_renamed"


def test_a_function_with_no_renamed_keyword_is_refused():
    with pytest.raises(AssertionError, match="takes no renamed keyword"):
        accepts_renamed(lambda data, s3=None: None)
