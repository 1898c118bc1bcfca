"""``GPUDirectReader``: the objects under an ``s3://`` prefix as the outputs of a DALI pipeline.

The seed documents' call works as written::

    @pipeline_def
    def training_pipeline():
        images = GPUDirectReader(endpoint="http://localhost:9000", bucket="images", prefix="train/")
        return images

Objects are listed once, when the pipeline is defined; every epoch reads each of them
once (this shard's part), through :class:`turbofeed.gds.GPUDirectClient` (ranged GETs,
retries, the ETag of the listing on every read). Object storage has no GPUDirect path:
the bytes land in host memory and DALI moves them (``.gpu()``, ``device="mixed"``).
"""

from __future__ import annotations

import functools
import io
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.executor import Executor
from ..errors import DatasetError, SampleError, StorageError, TurbofeedError
from ..gds import GDSConfig, GPUDirectClient
from ..io.stores.config import ObjectInfo, S3Config
from ..io.stores.errors import changed
from ..plan import EpochPlan, make_epoch_plan
from ._require import current_batch_size, dali_fn
from .batches import shard_of

#: Objects parsed into arrays with ``tensors=True``; every other object is its bytes.
TENSOR_EXTENSIONS = (".npy", ".pt", ".pth")


class ObjectBatches:
    """``source`` of ``fn.external_source(batch_info=True)`` over listed objects: batch
    ``iteration`` of epoch ``epoch_idx`` of this shard, a pure function of the two (DALI's
    checkpoints resume exactly). The order is :func:`turbofeed.plan.make_epoch_plan`'s
    over the sorted listing: shuffled per (seed, epoch) with ``shuffle``, split strided
    over shards with wrap-around padding (or ``drop_last``).

    Outputs: each object's bytes as a uint8 array (``tensors``: a ``.npy`` as its array,
    a ``.pt``/``.pth`` holding one tensor as that tensor's array); with ``return_keys``,
    the object's key as UTF-8 bytes. At most ``threads`` reads in flight
    (``turbofeed-dali-objects-<i>`` threads, started at the first batch).

    Raises (from a call):
        StorageError: an object changed or vanished since it was listed, or its read
            failed after the client's retries.
        SampleError: ``tensors`` and an object that does not parse.
    """

    def __init__(self, client: GPUDirectClient, objects: Sequence[ObjectInfo], *, batch_size: int,
                 shuffle: bool, seed: int, shard_id: int, num_shards: int, drop_last: bool = False,
                 tensors: bool = True, return_keys: bool = False, threads: int = 4, owns_client: bool = False) -> None:
        if batch_size < 1 or threads < 1:
            raise ValueError(f"batch_size and threads must be >= 1, got {batch_size}, {threads}")
        self.client = client
        self.objects = list(objects)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.shard_id, self.num_shards, self.drop_last = shard_id, num_shards, drop_last
        self.tensors, self.return_keys, self.threads = tensors, return_keys, threads
        self._plan: tuple[int, EpochPlan] | None = None
        self._lock = threading.Lock()
        self._pool: list[Executor | None] = [None]
        self._finalizer = weakref.finalize(self, _close, self._pool, client if owns_client else None)
        if len(self) == 0:
            self.close()
            raise ValueError(f"batch_size={batch_size} with drop_last=True leaves no batch: shard {shard_id} "
                             f"of {num_shards} has {len(self.plan(0).order)} objects")

    @property
    def num_outputs(self) -> int:
        return 1 + int(self.return_keys)

    def plan(self, epoch: int) -> EpochPlan:
        kept = self._plan
        if kept is None or kept[0] != epoch:
            kept = self._plan = (epoch, make_epoch_plan(
                len(self.objects), batch_size=self.batch_size, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
                rank=self.shard_id, world_size=self.num_shards, drop_last=self.drop_last))
        return kept[1]

    def __len__(self) -> int:
        return len(self.plan(0) if self._plan is None else self._plan[1])

    def __call__(self, info: Any) -> list[np.ndarray] | tuple[list[np.ndarray], ...]:
        """The outputs of batch ``info.iteration`` of epoch ``info.epoch_idx`` (a list of
        arrays; with ``return_keys``, two lists).

        Raises:
            StopIteration: the epoch has no batch ``info.iteration``.
        """
        with self._lock:
            plan = self.plan(int(info.epoch_idx))
        index = int(info.iteration)
        if index >= len(plan):
            raise StopIteration
        ids = [int(plan.order[p]) for p in plan.batch_positions(index)]
        pool = self._pool[0]
        if pool is None and self.threads > 1:
            pool = self._pool[0] = Executor(self.threads, "dali-objects")
        # a weak reference in the task, as in DatasetBatches: idle pool threads keep their last task
        outs = [self._read(i) for i in ids] if pool is None else pool.run_all(
            functools.partial(_read_one, weakref.ref(self)), ids)
        if not self.return_keys:  # one output: external_source without num_outputs takes the list
            return [out[0] for out in outs]
        return tuple(list(column) for column in zip(*outs))

    def _read(self, i: int) -> tuple[np.ndarray, ...]:
        info = self.objects[i]
        parse = self.tensors and info.url.endswith(TENSOR_EXTENSIONS)
        buf: bytearray | np.ndarray = bytearray(info.size) if parse else np.empty(info.size, np.uint8)
        if info.size:
            try:
                self.client.read_url(info.url, buf, size=info.size, object_size=info.size, etag=info.etag)
            except (OSError, TurbofeedError) as exc:
                why = "replaced since it was listed (its ETag changed)" if changed(exc) else f"read failed: {exc}"
                raise StorageError(info.url, why) from exc
        out = _parse(info.url, buf) if isinstance(buf, bytearray) else buf
        if not self.return_keys:
            return (out,)
        key = info.url.split("/", 3)[3]  # s3://bucket/KEY
        return out, np.frombuffer(key.encode(), np.uint8)

    def close(self) -> None:
        """Stop the read threads and close the client if the reader made it; idempotent."""
        self._finalizer()


def _parse(url: str, data: bytearray) -> np.ndarray:
    """The array a ``.npy`` or one-tensor ``.pt`` object holds.

    Raises:
        SampleError: it does not parse, or a ``.pt`` holds something other than one tensor.
    """
    where, _, name = url.rpartition("/")
    try:
        if url.endswith(".npy"):
            return np.load(io.BytesIO(data), allow_pickle=False)
        from ..gds.tensors import load_pt

        value = load_pt(data, "cpu")
    except (ValueError, OSError, ImportError) as exc:
        raise SampleError(where, name, "decode.cpu", f"{type(exc).__name__}: {exc}") from exc
    if type(value).__module__.split(".")[0] != "torch" or not hasattr(value, "numpy"):
        raise SampleError(where, name, "decode.cpu", f"holds a {type(value).__name__}, not one tensor; "
                                                     f"read it with tensors=False and parse it yourself")
    return value.detach().contiguous().numpy()


def _read_one(ref: weakref.ref[ObjectBatches], i: int) -> tuple[np.ndarray, ...]:
    batches = ref()
    if batches is None:  # cannot happen while the caller waits on run_all: it holds the object
        raise RuntimeError("turbofeed.dali: the reader was dropped while a batch was being read")
    return batches._read(i)


def _close(holder: list[Executor | None], client: GPUDirectClient | None) -> None:
    pool, holder[0] = holder[0], None
    if pool is not None:
        pool.close()
    if client is not None:
        client.close()


def GPUDirectReader(endpoint: str | None = None, bucket: str | None = None, prefix: str = "", *,  # noqa: N802
                    access_key: str | None = None, secret_key: str | None = None, region: str | None = None,
                    config: GDSConfig | str | None = None, s3_config: S3Config | None = None,
                    client: GPUDirectClient | None = None, shuffle: bool = False, seed: int = 0,
                    shard_id: int | None = None, num_shards: int | None = None, drop_last: bool = False,
                    tensors: bool = True, extensions: Sequence[str] | None = None, return_keys: bool = False,
                    threads: int = 4, name: str | None = None) -> Any:
    """Every object under ``s3://bucket/prefix`` once per epoch, as DALI outputs.

    Call it inside a DALI pipeline definition (the batch size is the pipeline's); it
    returns a ``DataNode`` (with ``return_keys``, a tuple of two: data, keys). Named like a
    class because the seed documents call it so; it is a function.

    Args:
        endpoint: the S3 endpoint (``http://localhost:9000``); default: the AWS variables
            and config (``AWS_ENDPOINT_URL``, profile), as :class:`turbofeed.S3Config`.
        bucket: the bucket (required).
        prefix: objects whose key starts with it (``"train/"``); ``""``: the whole bucket.
        access_key, secret_key, region: static credentials; default: the AWS chain
            (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profile, SSO).
        config: the client's :class:`turbofeed.gds.GDSConfig` (or a YAML path).
        s3_config: a full :class:`turbofeed.S3Config` instead of the endpoint and keys.
        client: a :class:`~turbofeed.gds.GPUDirectClient` to use (kept open; the reader
            makes and owns one otherwise).
        shuffle, seed, drop_last: as the DataLoader's (a new order every epoch).
        shard_id, num_shards: this pipeline's part; default: torch's rank and world size
            or the launcher's variables, one shard without any.
        tensors: ``.npy`` objects as their arrays, ``.pt``/``.pth`` holding one tensor as
            its array; False: every object as bytes. A batch must agree in dtype and
            number of dimensions (DALI's rule): keep tensors and other files apart.
        extensions: keep only keys ending in one of these (``[".jpg", ".png"]``).
        return_keys: a second output, the object key as UTF-8 bytes.
        threads: reads in flight.
        name: the external source's name in the graph.

    Raises:
        turbofeed.MissingExtra: DALI is not installed (names the pip command).
        DatasetError: no object under the prefix (after ``extensions``).
    """
    fn, _ = dali_fn()
    batch_size = current_batch_size("turbofeed.dali.GPUDirectReader")
    if not bucket:
        raise ValueError("GPUDirectReader needs bucket= (and usually prefix=)")
    rank, world = shard_of(shard_id, num_shards)
    owns = client is None
    if client is None:
        client = GPUDirectClient(endpoint, access_key, secret_key, region=region, config=config, s3_config=s3_config)
    try:
        found = _listing(client, f"s3://{bucket}/{prefix}", extensions)
        batches = ObjectBatches(client, found, batch_size=batch_size, shuffle=shuffle, seed=seed, shard_id=rank,
                                num_shards=world, drop_last=drop_last, tensors=tensors, return_keys=return_keys,
                                threads=threads, owns_client=owns)
    except BaseException:
        if owns:
            client.close()
        raise
    nodes = fn.external_source(source=batches, batch_info=True, batch=True, name=name,
                               num_outputs=2 if return_keys else None)
    return tuple(nodes) if return_keys else nodes  # a tuple: `return GPUDirectReader(...)` gives two outputs


def _listing(client: GPUDirectClient, url: str, extensions: Sequence[str] | None) -> list[ObjectInfo]:
    """The objects under ``url`` (sorted), kept to ``extensions``.

    Raises:
        DatasetError: none.
    """
    found = [o for o in client.objects.s3.list(url) if not o.url.endswith("/")]
    if extensions is not None:
        wanted = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
        found = [o for o in found if o.url.lower().endswith(wanted)]
    if not found:
        raise DatasetError(f"no objects under {url}" + (f" ending in {', '.join(extensions)}" if extensions else ""))
    return found
