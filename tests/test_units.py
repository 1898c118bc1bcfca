"""units.parse_size: the one size parser of every setting (S3 node cache, GDS client)."""

from __future__ import annotations

import pytest

from turbofeed.io import S3Config
from turbofeed.io.stores.config import cache_limit
from turbofeed.units import SizeError, parse_size


@pytest.mark.parametrize("raw, expected", [
    (4096, 4096), ("4096", 4096), ("512B", 512), ("4k", 4096), ("16M", 16 << 20), ("16MiB", 16 << 20),
    ("16mb", 16 << 20), ("1.5 GB", 3 << 29), (" 2 G ", 2 << 30), ("1T", 1 << 40),
])
def test_sizes(raw, expected):
    assert parse_size(raw) == expected


@pytest.mark.parametrize("raw", ["lots", "", "1.5", "0", "-4k", "inf", "nan", True, None, 2.0])
def test_a_bad_size_names_the_setting_the_value_and_where_it_came_from(raw):
    with pytest.raises(SizeError) as info:
        parse_size(raw, "buffer_pool_size", "file /etc/gds.yaml")
    assert str(info.value) == (f"buffer_pool_size: must be a size > 0 like 16777216 or '16M', got {raw!r} "
                               "(file /etc/gds.yaml)")
    assert isinstance(info.value, ValueError)


def test_zero_where_the_setting_allows_it():
    assert parse_size("0", minimum=0) == 0
    with pytest.raises(SizeError, match=">= 0"):
        parse_size("-1", minimum=0)


def test_the_s3_cache_bound_comes_from_the_config_then_the_variable(monkeypatch):
    monkeypatch.delenv("TURBOFEED_S3_CACHE_SIZE", raising=False)
    assert cache_limit(S3Config()) is None
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", "200G")
    assert cache_limit(S3Config()) == 200 << 30
    assert cache_limit(S3Config(cache_max_bytes=1234)) == 1234
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", "lots")
    with pytest.raises(SizeError, match=r"TURBOFEED_S3_CACHE_SIZE: .*'lots' \(env TURBOFEED_S3_CACHE_SIZE\)"):
        cache_limit(S3Config())
