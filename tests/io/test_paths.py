"""io.paths and io.registry.resolve: what users pass (brace pattern, list, glob, folder)
becomes concrete sources, and every unusable spec fails with a DatasetError that names the
offending path."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import socket
import time

import pytest

from turbofeed.errors import DatasetError
from turbofeed.io import expand_braces, resolve


@pytest.mark.parametrize("pattern,expected", [
    ("shard-{000000..000002}.tar", ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]),
    ("s{8..11}", ["s8", "s9", "s10", "s11"]),
    ("s{08..11}", ["s08", "s09", "s10", "s11"]),
    ("s{3..1}", ["s3", "s2", "s1"]),
    ("{train,val}/x.tar", ["train/x.tar", "val/x.tar"]),
    ("a{0..1}-{x,y}.tar", ["a0-x.tar", "a0-y.tar", "a1-x.tar", "a1-y.tar"]),
    ("plain.tar", ["plain.tar"]),
    ("odd{name}.tar", ["odd{name}.tar"]),
    # nested, stepped, letters, unbalanced (#27: the hand-written expansion got these wrong)
    ("x{a,{b,c}}y", ["xay", "xby", "xcy"]),
    ("d{0,1{0..1}}", ["d0", "d10", "d11"]),
    ("s-{0..6..2}", ["s-0", "s-2", "s-4", "s-6"]),
    ("s-{000..010..5}", ["s-000", "s-005", "s-010"]),
    ("{a..c}.tar", ["a.tar", "b.tar", "c.tar"]),
    ("open{brace.tar", ["open{brace.tar"]),
    ("s3://b/p-{0..1}.tar", ["s3://b/p-0.tar", "s3://b/p-1.tar"]),
])
def test_expand_braces(pattern, expected):
    assert expand_braces(pattern) == expected


def test_brace_pattern_over_real_shards(shards, shard_paths):
    got = resolve(os.path.join(shards, "shard-{000000..000002}.tar"))
    assert got == [("tar", p) for p in shard_paths]


def test_directory_of_tars_is_a_shard_list(shards, shard_paths):
    assert resolve(shards) == [("tar", p) for p in shard_paths]
    assert resolve(pathlib.Path(shards)) == [("tar", p) for p in shard_paths]


def test_directory_without_tars_is_an_image_folder(image_folder):
    assert resolve(image_folder) == [("folder", image_folder)]


def test_glob_and_list(shards, shard_paths, image_folder):
    assert resolve(os.path.join(shards, "shard-*.tar")) == [("tar", p) for p in shard_paths]
    assert resolve([shard_paths[2], image_folder]) == [
        ("tar", shard_paths[2]), ("folder", image_folder)]


def test_glob_matching_nothing(shards):
    pattern = os.path.join(shards, "nothing-*.tar")
    with pytest.raises(DatasetError, match="matches no files") as info:
        resolve(pattern)
    assert pattern in str(info.value)


def test_missing_files_of_a_pattern_are_named(shards):
    """Only the missing expansions are listed, with the pattern they came from."""
    pattern = os.path.join(shards, "shard-{000000..000004}.tar")
    with pytest.raises(DatasetError) as info:
        resolve(pattern)
    message = str(info.value)
    assert "shard-000003.tar" in message and "shard-000004.tar" in message
    assert "shard-000001.tar" not in message and pattern in message


def test_missing_single_path(tmp_path):
    with pytest.raises(DatasetError, match="no such file") as info:
        resolve(str(tmp_path / "absent.tar"))
    assert str(tmp_path / "absent.tar") in str(info.value)


def test_s3_url_without_credentials_or_endpoint_fails_fast_naming_it(monkeypatch, tmp_path):
    """s3:// is supported (tests/io/stores/test_s3_*.py); a URL that cannot be reached fails at
    once with a DatasetError naming it: missing credentials are final, and an endpoint
    that never answered gets 3 quick tries, not the whole retry policy."""
    if importlib.util.find_spec("obstore") is None and importlib.util.find_spec("boto3") is None:
        pytest.skip("needs obstore or boto3 (pip install 'turbofeed[s3]')")
    from turbofeed.io import S3Config
    from turbofeed.io.stores.urls import close_clients

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask the network
    url = "s3://bucket/shard-000000.tar"
    try:
        started = time.monotonic()
        with pytest.raises(DatasetError, match=re.escape(url) + ".*no AWS credentials found"):
            resolve(url, storage=S3Config())
        assert time.monotonic() - started < 3

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        with socket.socket() as closed:  # bound, never listening: connections are refused
            closed.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
            monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
            started = time.monotonic()
            with pytest.raises(DatasetError) as info:
                resolve(url, storage=S3Config())
            assert time.monotonic() - started < 3
        message = str(info.value)
        assert url in message and f"cannot connect to {endpoint} (3 attempts" in message
        assert len(message) < 600 and "Debug" not in message
    finally:
        close_clients()


def test_empty_list():
    with pytest.raises(DatasetError, match="empty"):
        resolve([])


def test_file_that_is_not_a_shard(tmp_path):
    other = tmp_path / "images.zip"
    other.write_bytes(b"PK\x03\x04")
    with pytest.raises(DatasetError, match="not a .tar shard") as info:
        resolve(str(other))
    assert str(other) in str(info.value)
