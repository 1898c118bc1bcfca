"""Fixtures of the GPUDirect-style client tests: a real S3 server on 127.0.0.1, clients,
and a stand-in for GPU memory.

The only stand-in is for the GPU itself, which cannot exist on a CPU-only machine:
``CpuStandInDevice`` is a :class:`turbofeed.gds.DeviceBuffer` whose host<->device copy is
a CPU copy, so the staging path (chunks, pinned pool, ordering, failures) runs exactly as
it would for CUDA memory. Real CUDA buffers are tested in ``test_cuda.py`` (skipped
without a GPU).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from turbofeed.gds import DeviceBuffer, GDSConfig, GPUDirectClient

BUCKET = "tf-gds"


@pytest.fixture(autouse=True)
def _clean_gds_env(monkeypatch):
    """Settings from the developer's shell must not leak into the tests."""
    import os

    for name in list(os.environ):
        if name.startswith("TURBOFEED_GDS_") or name == "KVIKIO_COMPAT_MODE":
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 on 127.0.0.1, stopped when the session ends; one bucket."""
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as server:
        boto(server).create_bucket(Bucket=BUCKET)
        yield server


def boto(server):
    """A plain boto3 client on the server, to check what is stored independently of ours."""
    import boto3

    return boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


@pytest.fixture
def make_client(s3_server):
    """``make_client(**GDSConfig fields)`` -> a client on the local server, closed after the test."""
    made: list[GPUDirectClient] = []

    def make(endpoint: str | None = None, s3_config=None, **config) -> GPUDirectClient:
        client = GPUDirectClient(endpoint or s3_server.endpoint, "test", "test", region="us-east-1",
                                 config=GDSConfig(**config), s3_config=s3_config)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def make_file_client():
    """``make_file_client(**GDSConfig fields)`` -> a client for local files only (no S3
    server, so no moto/boto3: the GPU machine has neither), closed after the test."""
    made: list[GPUDirectClient] = []

    def make(**config) -> GPUDirectClient:
        client = GPUDirectClient(config=GDSConfig(**config))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def payload(size: int, seed: int = 0) -> np.ndarray:
    """``size`` random bytes: a misplaced chunk cannot go unnoticed."""
    return np.frombuffer(np.random.default_rng(seed).bytes(size), dtype=np.uint8).copy()


def same_bytes(a, b, step: int = 16 << 20) -> bool:
    """Byte equality in slices, so a 256 MiB comparison needs no 256 MiB temporary."""
    a, b = memoryview(a).cast("B"), memoryview(b).cast("B")
    if len(a) != len(b):
        return False
    return all(np.array_equal(np.frombuffer(a[i:i + step], np.uint8), np.frombuffer(b[i:i + step], np.uint8))
               for i in range(0, len(a), step))


class CpuStandInDevice(DeviceBuffer):
    """CPU memory posing as CUDA memory (see the module docstring).

    Args:
        size: bytes.
        fail_download_at: raise OSError when asked for bytes at this position (to break
            a write in the middle).
    """

    def __init__(self, size: int, fail_download_at: int | None = None) -> None:
        import torch

        super().__init__(torch.zeros(size, dtype=torch.uint8), f"stand-in device buffer ({size} bytes)")
        self.fail_download_at = fail_download_at
        self.copies: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def mark_ready(self) -> None:
        pass

    def upload(self, pos: int, staging, n: int) -> None:
        assert staging.numel() >= n
        self.flat[pos:pos + n].copy_(staging[:n])
        with self._lock:
            self.copies.append(("upload", pos, n))

    def download(self, pos: int, staging, n: int) -> None:
        if self.fail_download_at is not None and pos <= self.fail_download_at < pos + n:
            raise OSError(f"stand-in device copy failed at byte {self.fail_download_at}")
        staging[:n].copy_(self.flat[pos:pos + n])
        with self._lock:
            self.copies.append(("download", pos, n))


@pytest.fixture
def helpers():
    """``payload``, ``same_bytes``, ``boto``, ``StandIn`` and ``BUCKET`` for the test modules
    (with ``--import-mode=importlib`` a test cannot import conftest)."""
    return SimpleNamespace(payload=payload, same_bytes=same_bytes, boto=boto, StandIn=CpuStandInDevice,
                           BUCKET=BUCKET)
