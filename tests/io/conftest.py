"""Fixtures of the storage tests."""

from __future__ import annotations

import json

import pytest
from builders import encode, photo, small_jpeg, write_tar

from turbofeed.io import split_key


@pytest.fixture
def point_aws_at(monkeypatch, tmp_path):
    """``point_aws_at(endpoint)``: the usual AWS variables name a local S3 server (test
    keys, no profile) and the node cache is fresh for this test."""

    def point(endpoint: str) -> None:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))

    return point


def laion_members(first: int = 0, count: int = 6) -> list[tuple[str, bytes]]:
    """Members of a LAION-style shard (img2dataset's layout): per key a ``.jpg``, a ``.txt``
    caption and a ``.json`` of metadata, with the exceptions tests look for: key 3 has
    no ``.json``, key 4 a ``.png`` instead of the ``.jpg``, key 5 its members in another
    order (caption first)."""
    members: list[tuple[str, bytes]] = []
    for k in range(first, first + count):
        key = f"{k:09d}"
        caption = f"a photo of thing number {k}".encode()
        meta = json.dumps({"url": f"https://example.com/{k}.jpg", "width": 32, "height": 32,
                           "caption": caption.decode(), "status": "success"}).encode()
        image = (f"{key}.png", encode(photo(32, 32, seed=k), "PNG")) if k % 6 == 4 else \
            (f"{key}.jpg", small_jpeg(k))
        sample = [image, (f"{key}.txt", caption)] + ([] if k % 6 == 3 else [(f"{key}.json", meta)])
        if k % 6 == 5:
            sample = sample[1:2] + sample[:1] + sample[2:]
        members += sample
    return members


@pytest.fixture
def laion_shards(tmp_path) -> tuple[list[str], dict[str, dict[str, bytes]]]:
    """Two LAION-style shards of 6 samples each (:func:`laion_members`, keys 0-5 and 6-11)
    and every member's payload by key and extension."""
    paths, by_key = [], {}
    for s in range(2):
        members = laion_members(first=6 * s)
        paths.append(write_tar(str(tmp_path / f"laion-{s:06d}.tar"), members))
        for name, payload in members:
            key, ext = split_key(name)
            by_key.setdefault(key, {})[ext] = payload
    return paths, by_key
