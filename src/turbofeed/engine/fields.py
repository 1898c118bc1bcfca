"""General samples: any WebDataset member as a named field, read in the worker threads.

``fields={"image": "jpg;png;webp", "caption": "txt", "meta": "json?"}`` (parsed and
checked by :mod:`turbofeed.decode.field_specs`) names the fields of a sample and, for
each, the member extensions to look for. The field named ``image`` goes through the
decode stage chosen for the pass (fused crop-window decode, GPU, hybrid), into batch
slots as before; every other field is read and decoded by type in the same worker
thread, right after (``txt`` -> str, ``json`` -> object, ``cls`` -> int, ``npy`` ->
array, images -> uint8 arrays, else bytes; see :mod:`turbofeed.decode.fields`). A sample lacking a required field, or whose field
cannot be decoded, is a bad sample (the policy replaces, skips or raises, naming the
shard, key and field), so a batch's fields always belong to the same samples.

:class:`WithFields` wraps any decode stage: it keeps one dict of the other fields per
position and hands them on with the decode stage's own batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.stageinfo import StageInfo
from ..decode.field_specs import IMAGE, FieldOptions
from ..decode.fields import decode_field
from ..errors import StorageError
from ..io import pick_member
from ..io.table import IMAGE_EXTENSIONS
from ..transforms import nearest
from .stages import DecodeStage
from .usercode import name_of, raised, returned, routed
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job

class FieldReader:
    """Reads and decodes the fields other than ``image`` of one sample (worker threads);
    the ``paired`` ones (masks, depth maps) get the image's crop window and flip,
    nearest-neighbour (:func:`turbofeed.transforms.nearest`); then ``map``."""

    def __init__(self, work: SampleWork, options: FieldOptions, *, user_errors: str = "raise") -> None:
        self.work = work
        self.user_errors = user_errors  # what an exception from ``map`` becomes (engine.usercode)
        self.specs = [s for s in options.specs if s.name != IMAGE]
        self.decoders = options.decoders
        self.paired = options.paired
        self.map = options.map
        self.classes = options.classes

    def __call__(self, gid: int) -> dict[str, Any]:
        dataset = self.work.dataset
        present = dataset.member_exts(gid)
        out: dict[str, Any] = {}
        for spec in self.specs:
            ext = pick_member(present, spec.exts)
            if ext is None:
                if spec.optional:
                    out[spec.name] = None
                    continue
                raise self.work.error(gid, "fetch", LookupError(
                    f"no {';'.join(spec.exts)} member for field {spec.name!r} (the sample has "
                    f"{', '.join(present) or 'no members'})"))
            try:
                data = dataset.read_member(gid, ext)
            except StorageError:  # not bad data: past the policy
                raise
            except Exception as exc:
                raise self.work.error(gid, "fetch", exc) from exc
            try:
                value = decode_field(ext, data, self.decoders,  # type: ignore[arg-type]
                                     max_pixels=self.work.max_pixels)
            except Exception as exc:
                raise self.work.error(gid, "decode.cpu", ValueError(f"field {spec.name!r}: {exc}")) from exc
            if spec.name in self.paired:
                value = self._paired(gid, spec.name, value)
            if isinstance(value, np.ndarray) and value.ndim == 3 and ext.rsplit(".", 1)[-1] in IMAGE_EXTENSIONS:
                value = np.ascontiguousarray(value.transpose(2, 0, 1))  # images are (3, H, W), as "image"
            out[spec.name] = value
        if self.classes is not None and isinstance(out.get("label"), str):
            if out["label"] not in self.classes:
                raise self.work.error(gid, "decode.cpu", ValueError(
                    f"label {out['label']!r} is not one of the {len(self.classes)} classes"))
            out["label"] = self.classes[out["label"]]
        return out if self.map is None else self._mapped(gid, out)

    def _mapped(self, gid: int, fields: dict[str, Any]) -> dict[str, Any]:
        url, key = self.work.dataset.describe(gid)
        name = name_of("map", self.map)  # type: ignore[arg-type]
        try:
            out = self.map({**fields, "__key__": key, "__url__": url})  # type: ignore[misc]
        except Exception as exc:
            raise routed(raised(name, exc, url, key), self.user_errors, self.work, gid) from exc
        if not isinstance(out, dict):
            raise routed(returned(name, out, "a dict", url, key), self.user_errors, self.work, gid)
        return {k: v for k, v in out.items() if k not in ("__key__", "__url__", IMAGE)}

    def _paired(self, gid: int, name: str, value: Any) -> np.ndarray:
        """``value`` cut by the image's crop window and flip. It must have the image's
        size: a mask of another size stretched onto the crop would agree with the image
        only where the stretch happens to line up, so it is a bad sample instead."""
        found = self.work.last_window(gid)  # the image was decoded just before, in this thread
        if found is None or not isinstance(value, np.ndarray) or value.ndim not in (2, 3):
            why = "the image's window is unknown" if found is None else f"it decoded to {type(value).__name__}"
            raise self.work.error(gid, "augment", ValueError(f"field {name!r} is paired with the image but {why}"))
        (height, width), image = value.shape[:2], found[1]
        if (height, width) != tuple(image):
            raise self.work.error(gid, "augment", ValueError(
                f"field {name!r} is {width}x{height} but the image is {image[1]}x{image[0]} (width x height): "
                "a paired field must have the image's size"))
        return nearest(value, *found)


@dataclass
class FieldsBuffer:
    """A batch in flight: the decode stage's own buffer and the other fields per position."""

    inner: Any
    fields: list[dict[str, Any] | None]


class WithFields:
    """Any decode stage plus the other fields of each sample.

    ``finish`` gives ``(the decode stage's batch, [fields of each kept sample])``.
    """

    def __init__(self, inner: DecodeStage, read: FieldReader, batch_size: int) -> None:
        self.inner = inner
        self.read = read
        self.batch_size = batch_size
        self.info = StageInfo(inner.info.name, inner.info.where, (*inner.info.counts, "fields"), inner.info.per_task)

    def acquire(self) -> FieldsBuffer:
        return FieldsBuffer(self.inner.acquire(), [None] * self.batch_size)

    def fill(self, gid: int, buffer: FieldsBuffer, j: int) -> None:
        self.inner.fill(gid, buffer.inner, j)  # a replacement refills both, so they stay paired
        buffer.fields[j] = self.read(gid)

    def finish(self, job: Job) -> tuple[Any, list[dict[str, Any]]]:
        buffer: FieldsBuffer = job.slot
        job.slot = buffer.inner  # the decode stage finishes its own buffer
        try:
            value = self.inner.finish(job)
        finally:
            job.slot = buffer
        return value, [buffer.fields[i] or {} for i in np.flatnonzero(job.ok)]

    def close(self) -> None:
        self.inner.close()


class NoImage:
    """The decode stage when no field is named ``image``: nothing per sample but the fields."""

    info = StageInfo("fetch", "sample", ("fetch",))

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def acquire(self) -> list[None]:
        return [None] * self.batch_size

    def fill(self, gid: int, buffer: list[Any], j: int) -> None:
        buffer[j] = gid

    def finish(self, job: Job) -> None:
        return None

    def close(self) -> None:
        pass
