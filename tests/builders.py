"""Real test data, built in memory: small JPEGs and tar shards, and shards uploaded to a
local S3 server (importable by every test module: pytest's ``pythonpath`` holds ``tests/``)."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import threading

import numpy as np
from PIL import Image

from turbofeed.io.retry import RetryPolicy

FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)  # a local server: retry at once


def photo(h: int = 96, w: int = 128, seed: int = 0) -> Image.Image:
    """A smooth colourful image (JPEG-friendly, so decoders agree closely)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    phase = np.random.default_rng(seed).uniform(0, 6, 3)
    rgb = np.stack([127 + 120 * np.sin(x / 9 + y / 13 + p) for p in phase], axis=-1)
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8))


def encode(im: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def small_jpeg(seed: int, size: int = 32) -> bytes:
    """A ``size`` x ``size`` JPEG of 8-pixel blocks of random colour, different per seed."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 255, (size // 8, size // 8, 3), dtype=np.uint8)
    return encode(Image.fromarray(np.repeat(np.repeat(cells, 8, 0), 8, 1)), quality=90)


def tar_bytes(members: list[tuple[str, bytes]], format: int = tarfile.USTAR_FORMAT) -> bytes:
    """A tar of the ``(name, payload)`` members, in order: plain (ustar) unless ``format``
    says otherwise (``tarfile.PAX_FORMAT`` for names of any length)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=format) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def write_tar(path: str, members: list[tuple[str, bytes]], format: int = tarfile.USTAR_FORMAT) -> str:
    """Write :func:`tar_bytes` of ``members`` to ``path``; returns ``path``."""
    with open(path, "wb") as f:
        f.write(tar_bytes(members, format))
    return str(path)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def upload_shards(endpoint: str, prefix: str, shards: int = 16, per_shard: int = 10) -> dict:
    """``shards`` tar shards of ``per_shard`` samples (``.jpg`` and ``.cls``, keys
    ``s<shard>-<i>``) uploaded to ``<prefix>shard-NNNN.tar`` on the S3 server at
    ``endpoint`` (the bucket of ``prefix`` created): ``bytes`` (all shards), ``keys`` and
    ``shard_bytes`` (the mean)."""
    from turbofeed.io.stores.client import S3Client  # boto3: only for the S3 tests
    from turbofeed.io.stores.config import S3Config

    client = S3Client(S3Config(endpoint_url=endpoint, access_key_id="test", secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=prefix.removeprefix("s3://").split("/", 1)[0])
    total, keys = 0, []
    for s in range(shards):
        members = []
        for i in range(per_shard):
            key = f"s{s:02d}-{i:03d}"
            keys.append(key)
            members += [(f"{key}.jpg", small_jpeg(1000 * s + i)), (f"{key}.cls", str(s % 4).encode())]
        body = tar_bytes(members)
        total += len(body)
        client.put(f"{prefix}shard-{s:04d}.tar", body)
    client.close()
    return {"bytes": total, "keys": keys, "shard_bytes": total // shards}


def keys_of(batches) -> list[str]:
    """The sample keys (without their shard) of batches loaded with ``return_keys=True``."""
    return [k.rsplit("/", 1)[-1] for batch in batches for k in batch[2]]


def keys_in_threads(loaders, timeout: float = 120.0) -> list[list[str]]:
    """Each loader's epoch of keys (:func:`keys_of`), the loaders iterated at once, one
    thread each (ranks of one node sharing a process's client and node cache)."""
    out: dict[int, list[str]] = {}

    def run(r: int) -> None:
        out[r] = keys_of(loaders[r])

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(loaders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert len(out) == len(loaders), f"{len(loaders) - len(out)} loader(s) did not end in {timeout} s"
    return [out[r] for r in range(len(loaders))]


class CacheWatch:
    """The largest number of bytes under a node cache's object and tmp folders, sampled
    every 5 ms by a thread from construction to :meth:`stop`."""

    def __init__(self, root: str) -> None:
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            used = 0
            for sub in ("objects", "tmp"):
                try:
                    for e in os.scandir(os.path.join(self.root, sub)):
                        if not e.name.endswith(".lock"):
                            try:
                                used += e.stat().st_blocks * 512 if e.name.endswith(".part") else e.stat().st_size
                            except FileNotFoundError:
                                pass
                except FileNotFoundError:
                    pass
            self.peak = max(self.peak, used)

    def stop(self) -> int:
        """Stop sampling; the peak."""
        self._stop.set()
        self._thread.join(5)
        return self.peak
