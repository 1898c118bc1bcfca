"""Fixtures of the storage tests."""

from __future__ import annotations

import pytest


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
