"""``turbofeed.io.s3``, the object store package's old name (docs/storage.md showed
``from turbofeed.io.s3.config import configure``), still imports for one release: it warns
once, naming the new path, and its modules are the very modules of ``turbofeed.io.stores``."""

from __future__ import annotations

import importlib
import sys

import pytest

import turbofeed.io.stores.config
import turbofeed.io.stores.families
import turbofeed.io.stores.stream


def forget_old_path() -> None:
    for name in [n for n in sys.modules if n == "turbofeed.io.s3" or n.startswith("turbofeed.io.s3.")]:
        del sys.modules[name]


def test_the_old_path_warns_once_and_gives_the_same_modules():
    forget_old_path()
    with pytest.warns(DeprecationWarning, match=r"turbofeed\.io\.s3 is now turbofeed\.io\.stores") as caught:
        from turbofeed.io.s3.config import S3Config, configure
        old_stream = importlib.import_module("turbofeed.io.s3.stream")
        import turbofeed.io.s3.urls  # noqa: F401
    assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) == 1
    assert caught[0].filename == __file__  # the importing line, not the import machinery
    assert S3Config is turbofeed.io.stores.config.S3Config
    assert configure is turbofeed.io.stores.config.configure
    assert old_stream is turbofeed.io.stores.stream
    assert sys.modules["turbofeed.io.s3"].urls is sys.modules["turbofeed.io.stores.urls"]
    from turbofeed.io.s3.stores import AzureConfig  # the module renamed inside the package too
    assert AzureConfig is turbofeed.io.stores.families.AzureConfig
    forget_old_path()
