"""``GPUDirectDataset``: a map-style torch Dataset of tensors stored one per file or object."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import DatasetError, SampleError, TurbofeedError
from ..io.retry import RemoteError
from ..io.stores.config import parse_url
from ..io.stores.errors import changed
from .client import GPUDirectClient
from .config import GDSConfig
from .tensors import FormatError, load_npy, load_pt, load_safetensors

EXTENSIONS = (".npy", ".pt", ".pth", ".safetensors")


class GPUDirectDataset(torch.utils.data.Dataset):
    """Tensors stored one per local file or ``s3://`` object, returned on ``device``.

    ===============  ===============================================================
    file             item
    ===============  ===============================================================
    ``.npy``         a tensor: the header is parsed, then the raw bytes are read
                     straight into a tensor allocated on ``device`` (cuFile on a GDS
                     machine: no host copy)
    ``.pt``/``.pth`` what ``torch.load(..., weights_only=True)`` returns, on ``device``
    ``.safetensors`` ``{name: tensor}`` on ``device`` (needs ``pip install safetensors``)
    ===============  ===============================================================

    Args:
        items: a path or ``s3://`` URL, or a list of them. A local folder stands for its
            files with the extensions above (sorted, not recursive); an ``s3://...``
            URL ending in ``/`` for the objects under that prefix (sorted).
        device: where tensors go (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a torch.device).
        client: a :class:`GPUDirectClient` to use in this process; worker processes
            (``DataLoader(num_workers>0)``) make their own with the same settings.
        config, endpoint, access_key, secret_key, s3_config: for the client the dataset
            makes when none is given (see :class:`GPUDirectClient`).

    Raises:
        DatasetError: a missing path, a folder or prefix without tensor files, or an
            extension not in the table.

    ``dataset[i]`` raises :class:`~turbofeed.SampleError` naming the file, the stage
    (``fetch`` for I/O, ``decode.cpu`` for parsing) and the reason.
    """

    def __init__(self, items: str | os.PathLike | Sequence[str | os.PathLike], *, device: Any = "cpu",
                 client: GPUDirectClient | None = None, config: GDSConfig | str | None = None,
                 endpoint: str | None = None, access_key: str | None = None, secret_key: str | None = None,
                 s3_config: Any = None) -> None:
        self.device = torch.device(device)
        self._client = client
        self._owns_client = client is None
        self._pid = os.getpid()
        if client is not None:  # worker processes rebuild one like it
            config, s3_config = client.config, client.s3_config
        self._client_kwargs = dict(endpoint=endpoint, access_key=access_key, secret_key=secret_key,
                                   config=config, s3_config=s3_config)
        entries = [items] if isinstance(items, (str, os.PathLike)) else list(items)
        self.items: list[str] = []
        self._known: dict[str, tuple[int, str]] = {}  # s3 (size, etag) from a listing or a HEAD
        for entry in entries:
            self._add(os.fspath(entry))
        if not self.items:
            raise DatasetError(f"no tensor files ({', '.join(EXTENSIONS)}) in {entries!r}")

    def _add(self, entry: str) -> None:
        if entry.startswith("s3://"):
            if entry.endswith("/"):
                found = [o for o in self.client.objects.s3.list(entry) if o.url.endswith(EXTENSIONS)]
                if not found:
                    raise DatasetError(f"no objects ending in {', '.join(EXTENSIONS)} under {entry}")
                for info in found:
                    self.items.append(info.url)
                    self._known[info.url] = (info.size, info.etag)
                return
            _check_extension(entry)
            parse_url(entry)
            self.items.append(entry)
        elif os.path.isdir(entry):
            names = sorted(n for n in os.listdir(entry) if n.endswith(EXTENSIONS))
            if not names:
                raise DatasetError(f"{entry}: no files ending in {', '.join(EXTENSIONS)}")
            self.items.extend(os.path.join(entry, n) for n in names)
        elif os.path.isfile(entry):
            _check_extension(entry)
            self.items.append(entry)
        else:
            raise DatasetError(f"{entry}: no such file or folder")

    @property
    def client(self) -> GPUDirectClient:
        """This process's client (a fresh one in a worker process)."""
        if self._client is None or self._pid != os.getpid():
            self._client = GPUDirectClient(**self._client_kwargs)
            self._owns_client = True
            self._pid = os.getpid()
        return self._client

    def close(self) -> None:
        """Close the client the dataset made (not one passed in); idempotent."""
        if self._client is not None and self._owns_client:
            self._client.close()
        self._client = None

    def __enter__(self) -> GPUDirectDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        ref = self.items[index]
        where, key = _split(ref)
        try:
            try:
                return self._load(ref)
            except RemoteError as exc:
                if not changed(exc):
                    raise
                # Replaced since it was listed: all reads of one item carry one ETag, so
                # the item is read again, whole, from its new version.
                self._known.pop(ref, None)
                return self._load(ref)
        except (FormatError, ImportError) as exc:
            raise SampleError(where, key, "decode.cpu", str(exc)) from exc
        except (OSError, TurbofeedError) as exc:
            raise SampleError(where, key, "fetch", str(exc) if isinstance(exc, TurbofeedError)
                              else f"{type(exc).__name__}: {exc}") from exc

    def _load(self, ref: str) -> Any:
        size, read_into = self._reader(ref)
        if ref.endswith(".npy"):
            return load_npy(size, read_into, self.device)
        data = bytearray(size)
        read_into(data, 0, size)
        if ref.endswith(".safetensors"):
            return load_safetensors(data, self.device)
        return load_pt(data, self.device)

    def _reader(self, ref: str):
        client = self.client
        if ref.startswith("s3://"):
            known = self._known.get(ref)
            if known is None:
                info = client.objects.s3.head(ref)
                known = self._known[ref] = (info.size, info.etag)
            size, etag = known

            def read_into(buffer: Any, offset: int, n: int) -> int:
                return client.read_url(ref, buffer, offset=offset, size=n, object_size=size, etag=etag)
            return size, read_into

        def read_file(buffer: Any, offset: int, n: int) -> int:
            return client.read_file_to_gpu(ref, buffer, offset, n)
        return os.path.getsize(ref), read_file

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None  # threads and connections do not cross processes
        state["_owns_client"] = True
        return state


def _check_extension(ref: str) -> None:
    if not ref.endswith(EXTENSIONS):
        raise DatasetError(f"{ref}: unknown tensor file type; GPUDirectDataset reads {', '.join(EXTENSIONS)}")


def _split(ref: str) -> tuple[str, str]:
    """``(folder or s3://bucket/prefix, name)`` for :class:`SampleError`."""
    head, _, name = ref.rstrip("/").rpartition("/")
    return head, name


__all__ = ["EXTENSIONS", "GPUDirectDataset"]
