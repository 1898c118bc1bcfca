"""Fixtures of the s3:// tests: a local S3-compatible server (moto, on 127.0.0.1) per test
module, and the node cache configuration of the streaming tests."""

from __future__ import annotations

import pytest
from builders import FAST_RETRY


@pytest.fixture(scope="module")
def server():
    """A local S3 server for the test module (moto: modules that use it skip without it)."""
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as srv:
        yield srv


@pytest.fixture
def config(server, data, point_aws_at):
    """The AWS variables point at ``server``; an :class:`S3Config` for it whose node cache
    holds 30% of the module's ``data`` (a fixture of the streaming modules:
    :func:`builders.upload_shards`'s dict)."""
    from turbofeed.io.s3.config import S3Config
    from turbofeed.io.s3.urls import close_clients

    point_aws_at(server.endpoint)
    yield S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                   cache_max_bytes=int(0.3 * data["bytes"]), retry=FAST_RETRY)
    close_clients()
