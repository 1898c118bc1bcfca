"""``turbofeed.io.Dataset``, the opened dataset's old name (it collided with the public
``turbofeed.Dataset``, the description; issue 38), still works for one release: each use
warns once, naming ``turbofeed.io.IndexedDataset``, and gives that very class."""

from __future__ import annotations

import pytest

import turbofeed
import turbofeed.io
from turbofeed.io import IndexedDataset

NEW_NAME = r"turbofeed\.io\.Dataset is now turbofeed\.io\.IndexedDataset"


def deprecations(caught: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


def test_the_old_name_warns_and_is_the_indexed_dataset():
    with pytest.warns(DeprecationWarning, match=NEW_NAME) as caught:
        old = turbofeed.io.Dataset
    assert old is IndexedDataset
    assert len(deprecations(caught)) == 1
    assert caught[0].filename == __file__  # the line that reads it, not the io package


def test_the_old_name_imports_with_one_warning():
    with pytest.warns(DeprecationWarning, match=NEW_NAME) as caught:
        from turbofeed.io import Dataset
    assert Dataset is IndexedDataset
    assert len(deprecations(caught)) == 1
    assert caught[0].filename == __file__  # the importing line, not the import machinery


def test_the_opened_dataset_is_not_the_public_description():
    assert IndexedDataset is not turbofeed.Dataset
    assert "Dataset" not in turbofeed.io.__all__ and "IndexedDataset" in turbofeed.io.__all__
    with pytest.raises(AttributeError, match="has no attribute 'Datasett'"):
        turbofeed.io.Datasett  # noqa: B018: any other missing name is still an error
