"""``turbofeed convert``: between storage layouts, resumable, never leaving a partial output
under a final name.

* ``to_tar``: any dataset of encoded images (ImageFolder, Parquet, HDF5/Zarr of bytes,
  tar) to WebDataset shards ``shard-%06d.tar`` (``KEY.<ext>`` + ``KEY.cls`` or ``KEY.json`` ``{"label": name}``),
  their turbofeed index built, and a ``index.json`` shard list (wids format).
* ``to_npy``: any dataset to ``images.npy`` (N, size, size, 3) uint8, resized (shorter
  side to ``size``) and centre-cropped, plus ``labels.npy`` and ``keys.npy``, for
  decode-free epochs: ``turbofeed.DataLoader(DST)`` reads it memory-mapped.

Both write ``DST/.turbofeed-convert.json`` saying what is being converted. A rerun with
the same source and settings skips what is complete (published shards; the rows of the
array written so far) and continues; another source or setting is refused.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
from typing import Any

import numpy as np
from ._deps import tqdm

from .decode import probe
from .errors import DatasetError, SampleError
from .io import IndexedDataset, build_index, load_index
from .io.table import IMAGE_EXTENSIONS, split_key
from .io.local.writer import ShardWriter

log = logging.getLogger("turbofeed")

MANIFEST = ".turbofeed-convert.json"
_EXT_OF_FORMAT = {"jpeg": "jpg", "png": "png", "webp": "webp", "bmp": "bmp", "gif": "gif", "tiff": "tiff",
                  "ppm": "ppm"}


# -- shared --------------------------------------------------------------------------
def _write_json(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def _claim(dst: str, wanted: dict, has_output: bool) -> dict:
    """Check ``dst`` holds nothing or a conversion of the same thing; return its manifest.

    Raises:
        DatasetError: ``dst`` holds another conversion (naming the field that differs)
            or outputs that no turbofeed conversion wrote.
    """
    os.makedirs(dst, exist_ok=True)
    path = os.path.join(dst, MANIFEST)
    if os.path.exists(path):
        with open(path) as f:
            found = json.load(f)
        for field in wanted:
            if found.get(field) != wanted[field]:
                raise DatasetError(f"{dst}: holds a conversion with another {field} "
                                   f"({found.get(field)!r}, now {wanted[field]!r}); use an empty folder")
        return found
    if has_output:
        raise DatasetError(f"{dst}: already holds outputs not written by `turbofeed convert`; "
                           "use an empty folder")
    _write_json(path, wanted)
    return dict(wanted)


def _source_fields(ds: IndexedDataset) -> dict:
    return {"samples": ds.num_samples, "sources": ds.fingerprint_fields()["sources"]}


# -- to tar ----------------------------------------------------------------------------
def _tar_keys(ds: IndexedDataset) -> list[str]:
    """Keys usable as tar member names: the sources' keys, with dots in the last path part
    (which would split key from extension) made underscores; the global row numbers
    ``f"{gid:08d}"`` when that leaves duplicates (several files numbering their rows)."""
    keys = []
    for source in ds.sources:
        for key in source.table.keys:
            head, _, tail = key.rpartition("/")
            keys.append(f"{head}/{tail.replace('.', '_')}" if head else tail.replace(".", "_"))
    if len(set(keys)) != len(keys):
        log.warning("turbofeed: convert: sample keys repeat across sources; naming samples by "
                    "their global row number instead")
        keys = [f"{gid:08d}" for gid in range(ds.num_samples)]
    return keys


def _extension(data: bytes, name: str) -> str:
    try:
        ext = _EXT_OF_FORMAT.get(probe(data).format)
    except ValueError:
        ext = None
    if ext is None:
        ext = split_key(name.rsplit("/", 1)[-1])[1].rsplit(".", 1)[-1]
        if ext not in IMAGE_EXTENSIONS:
            raise ValueError("not an image format a tar member can carry")
    return ext


def to_tar(src: Any, dst: str, *, per_shard: int = 1000, format: str | None = None,
           format_options: dict | None = None, progress: bool = True) -> list[str]:
    """Copy the encoded images of ``src`` into tar shards in ``dst`` (bytes unchanged).

    Shard ``k`` holds samples ``k * per_shard ..`` of the dataset order, so a rerun
    skips published shards without reading their samples again. Unreadable samples are
    left out and logged.

    Returns:
        The shard paths.

    Raises:
        DatasetError: the source holds decoded pixels (use ``to_npy``), or ``dst``
            holds something else.
    """
    if per_shard < 1:
        raise ValueError(f"per_shard must be >= 1, got {per_shard}")
    ds = IndexedDataset(src, format=format, format_options=format_options)
    try:
        n = ds.num_samples
        pattern = os.path.join(dst, "shard-%06d.tar")
        os.makedirs(dst, exist_ok=True)
        has_tars = any(name.endswith(".tar") for name in os.listdir(dst))
        _claim(dst, {"version": 1, "to": "tar", "per_shard": per_shard, "source": _source_fields(ds)},
                     has_tars)
        for name in os.listdir(dst):
            if name.endswith(".tar.tmp"):  # a run killed mid-shard
                os.remove(os.path.join(dst, name))
        keys = _tar_keys(ds)
        shards = [pattern % k for k in range(math.ceil(n / per_shard))]
        bar = tqdm(total=n, desc="turbofeed: convert", unit="img", disable=None if progress else True)
        skipped = 0
        for k, path in enumerate(shards):
            lo, hi = k * per_shard, min(n, (k + 1) * per_shard)
            if not os.path.exists(path):
                with ShardWriter(pattern, per_shard, first=k) as writer:
                    for gid in range(lo, hi):
                        skipped += not _write_sample(ds, gid, keys[gid], writer)
                        bar.update()
                if not writer.shards:  # every sample of the shard was unreadable
                    continue
            else:
                bar.update(hi - lo)
        bar.close()
        published = [p for p in shards if os.path.exists(p)]
        if published:  # the dataset index, ready for the first loader
            build_index(published if len(published) < len(shards) else dst, progress=False)
        _write_json(os.path.join(dst, "index.json"), {
            "__kind__": "wids-shard-index-v1", "wids_version": 1, "name": os.path.basename(os.path.normpath(dst)),
            "shardlist": [{"url": os.path.basename(p), "nsamples": len(load_index(p)["rows"])} for p in published],
        })
        if skipped:
            log.warning("turbofeed: convert: %d unreadable samples left out", skipped)
        return published
    finally:
        ds.close()


def _write_sample(ds: IndexedDataset, gid: int, key: str, writer: ShardWriter) -> bool:
    source, i = ds.locate(gid)
    if gid in ds.bad:  # no image member, or a bad label: nothing to convert
        log.warning("turbofeed: convert: leaving out %s/%s: %s", source.path, source.table.keys[i], ds.bad[gid])
        return False
    try:
        data = source.read(i)
        if isinstance(data, np.ndarray):
            raise DatasetError(f"{source.path}: holds decoded pixels, not encoded images; "
                               "convert it with --to npy")
        members = {_extension(data, source.table.image_names[i]): data}
    except DatasetError:
        raise
    except Exception as exc:
        log.warning("turbofeed: convert: leaving out %s/%s: %s", source.path, source.table.keys[i], exc)
        return False
    label = source.table.labels[i]
    if source.classes and label is not None:  # an ImageFolder's ids: the names are its class folders
        label = source.classes[int(label)]
    if isinstance(label, str):  # not .txt: a .txt that is not an integer is a caption (io.labels)
        members["json"] = json.dumps({"label": label}).encode("utf-8")
    elif label is not None:
        members["cls"] = str(int(label)).encode()
    writer.write(key, members)
    return True


# -- to npy ----------------------------------------------------------------------------
_NPY_HEADER = 128  # fixed, so the shape can be rewritten in place when samples are left out


def _npy_header(dtype: np.dtype, shape: tuple[int, ...], total: int = _NPY_HEADER) -> bytes:
    """A version 1.0 .npy header of exactly ``total`` bytes (64-byte aligned data)."""
    text = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (
        np.lib.format.dtype_to_descr(np.dtype(dtype)), tuple(shape))
    body = text.ljust(total - 10 - 1) + "\n"
    if len(body) + 10 != total:
        raise ValueError(f"npy header for shape {shape} does not fit {total} bytes")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body.encode("latin1")


def _open_npy(path: str, dtype: np.dtype, shape: tuple[int, ...], create: bool) -> np.memmap:
    if create:
        with open(path, "wb") as f:
            f.write(_npy_header(dtype, shape))
            f.truncate(_NPY_HEADER + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return np.memmap(path, dtype=dtype, mode="r+", offset=_NPY_HEADER, shape=shape)


def _shrink_npy(path: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """Make the array hold only its first ``shape[0]`` rows (header rewritten, file cut)."""
    with open(path, "r+b") as f:
        f.write(_npy_header(dtype, shape))
        f.truncate(_NPY_HEADER + int(np.prod(shape)) * np.dtype(dtype).itemsize)


def to_npy(src: Any, dst: str, *, size: int = 224, workers: int = 2, format: str | None = None,
           format_options: dict | None = None, progress: bool = True, chunk: int = 256) -> str:
    """Decode, resize (shorter side to ``size``) and centre-crop every image of ``src`` into
    ``dst/images.npy`` (N, size, size, 3) uint8, with ``labels.npy`` and ``keys.npy``.

    Row ``r`` of the outputs is the ``r``-th readable sample in dataset order (the keys
    say which); with no unreadable samples, row ``g`` is global sample ``g``. Labels are
    the integer labels, or the class names when the source has names. Outputs are written
    as ``*.npy.tmp`` and renamed when complete; a rerun continues after the last chunk
    of ``chunk`` samples it finished, and does nothing once complete.

    Returns:
        The path of ``images.npy``.
    """
    from .base.executor import Executor
    from .engine.stats import Stats
    from .engine.work import SampleWork
    from .transforms import CenterCrop, Compose, Resize

    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    final = {name: os.path.join(dst, f"{name}.npy") for name in ("images", "labels", "keys")}
    tmp = {name: path + ".tmp" for name, path in final.items()}
    ds = IndexedDataset(src, format=format, format_options=format_options)
    try:
        n = ds.num_samples
        wanted = {"version": 1, "to": "npy", "size": size, "source": _source_fields(ds)}
        state = _claim(dst, wanted, any(os.path.exists(p) for p in final.values()))
        if state.get("complete") and all(os.path.exists(p) for p in final.values()):
            log.info("turbofeed: convert: %s is complete", final["images"])
            return final["images"]
        raw_keys = [k for s in ds.sources for k in s.table.keys]
        names = ds.class_names
        label_dtype = np.dtype(f"<U{max(1, max(map(len, names)))}") if names else np.dtype(np.int64)
        key_dtype = np.dtype(f"<U{max(1, max(map(len, raw_keys)))}")
        dtypes = {"images": np.dtype(np.uint8), "labels": label_dtype, "keys": key_dtype}
        shapes = {"images": (n, size, size, 3), "labels": (n,), "keys": (n,)}
        resume = state.get("next", 0) > 0 and all(os.path.exists(p) for p in tmp.values())
        if not resume:
            state.update(next=0, rows=0, left_out=[])
            state.pop("complete", None)
        arrays = {name: _open_npy(tmp[name], dtypes[name], shapes[name], create=not resume) for name in tmp}
        work = SampleWork(ds, Compose([Resize(size), CenterCrop(size)]), Stats(), seed=0, epoch=0)

        def load(gid: int) -> Any:
            try:
                return work.load(gid)
            except SampleError as exc:
                return exc

        bar = tqdm(total=n, initial=state["next"], desc="turbofeed: convert", unit="img",
                   disable=None if progress else True)
        pool = Executor(max(1, workers), "convert")
        try:
            while state["next"] < n:
                gids = range(state["next"], min(n, state["next"] + chunk))
                row = state["rows"]
                for gid, result in zip(gids, pool.run_all(load, gids)):
                    if isinstance(result, SampleError):
                        log.warning("turbofeed: convert: leaving out %s", result)
                        state["left_out"].append(f"{os.path.basename(result.shard)}/{result.key}")
                        continue
                    arrays["images"][row] = result.pixels
                    label = int(ds.labels[gid])
                    arrays["labels"][row] = names[label] if names and label >= 0 else (label if not names else "")
                    arrays["keys"][row] = raw_keys[gid]
                    row += 1
                for array in arrays.values():
                    array.flush()  # the rows first, then the manifest that counts them
                state.update(next=gids[-1] + 1, rows=row)
                _write_json(os.path.join(dst, MANIFEST), state)
                bar.update(len(gids))
        finally:
            pool.close()
        bar.close()
        rows = state["rows"]
        del arrays
        for name in ("keys", "labels", "images"):  # images last: its name marks completion
            if rows < n:
                _shrink_npy(tmp[name], dtypes[name], (rows, *shapes[name][1:]))
            os.replace(tmp[name], final[name])
        state["complete"] = True
        _write_json(os.path.join(dst, MANIFEST), state)
        if state["left_out"]:
            log.warning("turbofeed: convert: %d unreadable samples left out (listed in %s)",
                        len(state["left_out"]), MANIFEST)
        return final["images"]
    finally:
        ds.close()
