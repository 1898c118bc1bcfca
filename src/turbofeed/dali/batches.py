"""The batches of a turbofeed dataset as DALI's ``external_source`` asks for them.

:class:`DatasetBatches` is the ``source`` callable of :func:`turbofeed.dali.reader`: called
with DALI's ``BatchInfo``, it returns batch ``iteration`` of epoch ``epoch_idx`` of this
shard, a pure function of those two numbers and the options. That is what lets DALI's own
checkpoints (which store only the epoch and iteration) resume exactly, prefetched batches
included. The order is turbofeed's epoch plan (:func:`turbofeed.plan.make_epoch_plan`),
the one the DataLoader uses: the same shuffle per (seed, epoch), the same strided split
over shards with wrap-around padding (or ``drop_last``), the same bad-sample policy.

This module does not import DALI: the callable returns lists of NumPy arrays.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.ranks import check_pair, detect
from ..decode.field_specs import FieldSpec
from ..engine.build import PassOptions, build_pass
from ..engine.choose import OpenedData
from ..engine.run import Engine
from ..errors import DatasetError, SampleError
from ..io import IndexedDataset, pick_member
from ..plan import EpochPlan, make_epoch_plan

_EMPTY = np.zeros(0, np.uint8)


def shard_of(shard_id: int | None, num_shards: int | None) -> tuple[int, int]:
    """``(shard_id, num_shards)``: as given, else this process's rank and world size, as the
    DataLoader finds them (an initialised ``torch.distributed``, then torchrun, SLURM,
    Horovod, MPI variables; one shard when none says).

    Raises:
        ValueError: only one of the two given, or ``shard_id`` outside ``[0, num_shards)``.
    """
    check_pair(shard_id, num_shards, ("shard_id", "num_shards"))
    env = detect(shard_id, num_shards)
    return env.rank, env.world_size


def as_bytes(payload: bytes | memoryview | np.ndarray) -> np.ndarray:
    """A member's bytes as a 1-D uint8 array, without a copy (DALI copies what it is fed)."""
    if isinstance(payload, np.ndarray):
        return payload
    return np.frombuffer(payload, np.uint8) if len(payload) else _EMPTY


class DatasetBatches:
    """``source`` of ``fn.external_source(batch_info=True)`` over a turbofeed dataset.

    Each call returns the outputs of one batch, one list of arrays per output:

    ==================  =================================================================
    without ``fields``  ``data`` (a sample's encoded bytes as a uint8 array, or an array
                        source's array), ``labels`` (shape ``(1,)``, ``label_dtype``)
    ``fields``          one output per field: the bytes of the member it picks (an
                        optional field a sample lacks: an empty array)
    ``return_keys``     one more output: ``shard-000003.tar/00001234`` as UTF-8 bytes
    ==================  =================================================================

    Batches have ``batch_size`` samples, the epoch's last one fewer unless ``drop_last``;
    after the last, a call raises ``StopIteration`` (DALI ends the epoch; ``pipe.reset()``
    starts the next, reshuffled). Bad samples (no image, a bad label, a required field
    missing) follow ``on_error`` as in the DataLoader: ``"replace"`` takes the next good
    sample of this shard's order (same batch size), ``"skip"`` drops it, ``"raise"``
    raises :class:`~turbofeed.SampleError`.

    Batches are read by the DataLoader's engine (:func:`turbofeed.engine.build.build_pass`,
    reading each sample with :class:`SampleReader`): on ``threads`` worker threads, two
    batches ahead of DALI's calls, started at the first call and stopped by :meth:`close`
    or when the object is collected.

    Args:
        source: the opened data (:meth:`turbofeed.engine.choose.OpenedData.open`).
        batch_size: samples per batch (the pipeline's).
        shuffle, seed, drop_last: as the DataLoader's.
        shard_id, num_shards: this shard and the shard count (the DataLoader's rank and
            world size).
        fields: the field specs, or None for ``(data, labels)``.
        return_keys: add the keys output.
        label_dtype: ``np.int64`` or ``np.int32``.
        threads: read threads per batch.
    """

    def __init__(self, source: OpenedData, *, batch_size: int, shuffle: bool, seed: int, shard_id: int,
                 num_shards: int, drop_last: bool = False, fields: Sequence[FieldSpec] | None = None,
                 return_keys: bool = False, label_dtype: Any = np.int64, threads: int = 2) -> None:
        if batch_size < 1 or threads < 1:
            raise ValueError(f"batch_size and threads must be >= 1, got {batch_size}, {threads}")
        self.label_dtype = np.dtype(label_dtype)
        if self.label_dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
            raise ValueError(f"label_dtype must be int64 or int32, got {self.label_dtype}")
        self.source = source
        self.dataset = source.dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.shard_id, self.num_shards = shard_id, num_shards
        self.drop_last = drop_last
        self.fields = list(fields) if fields is not None else None
        self.return_keys = return_keys
        self.threads = threads
        # what each pass reads per sample: holds no ``self``, so the pass's threads do not
        # keep this object (which DALI may drop) alive
        self.read = SampleReader(self.dataset, self.fields, return_keys, self.label_dtype)
        self._plan: tuple[int, EpochPlan] | None = None  # the epoch asked for last, and its plan
        self._pass: list[_Pass | None] = [None]  # the running pass (closed with this object)
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_pass, self._pass)
        if len(self) == 0:
            raise ValueError(f"batch_size={batch_size} with drop_last=True leaves no batch: shard {shard_id} "
                             f"of {num_shards} has {len(self.plan(0).order)} samples")

    @property
    def num_outputs(self) -> int:
        return (2 if self.fields is None else len(self.fields)) + int(self.return_keys)

    def plan(self, epoch: int) -> EpochPlan:
        """This shard's plan of ``epoch`` (kept for the epoch asked for last)."""
        kept = self._plan
        if kept is not None and kept[0] == epoch:
            return kept[1]
        if kept is not None:  # a new epoch: re-index shards changed on disk, as a loader's pass does
            _close_pass(self._pass)  # no pass reads them meanwhile
            self.source.refresh()
        plan = make_epoch_plan(self.dataset.num_samples, batch_size=self.batch_size, seed=self.seed, epoch=epoch,
                               shuffle=self.shuffle, rank=self.shard_id, world_size=self.num_shards,
                               drop_last=self.drop_last)
        self._plan = (epoch, plan)
        return plan

    def __len__(self) -> int:
        """Batches per epoch on this shard (the same on every shard)."""
        return len(self.plan(0) if self._plan is None else self._plan[1])

    def __call__(self, info: Any) -> tuple[list[np.ndarray], ...]:
        """The outputs of batch ``info.iteration`` of epoch ``info.epoch_idx``.

        Raises:
            StopIteration: the epoch has no batch ``info.iteration``.
        """
        epoch, index = int(info.epoch_idx), int(info.iteration)
        with self._lock:  # one batch at a time; DALI calls from one thread anyway
            plan = self.plan(epoch)
            if index >= len(plan):
                raise StopIteration
            kept = self._batch(epoch, plan, index)
        if not kept:  # DALI cannot take an empty batch; every sample of it was bad and skipped
            raise DatasetError(f"batch {index} of epoch {epoch} (shard {self.shard_id}): every sample "
                               f"is bad and on_error='skip' dropped them all")
        self.source.stats.count("batches")
        self.source.stats.count("samples", len(kept))
        return tuple(list(column) for column in zip(*kept))

    def _batch(self, epoch: int, plan: EpochPlan, index: int) -> list[tuple[np.ndarray, ...]]:
        """Batch ``index`` of ``plan``'s pass: the running one where it is the batch it
        yields next (DALI asks in order), else a pass started at that batch (DALI
        restored a checkpoint, or a new epoch): the DataLoader's engine
        (:func:`~turbofeed.engine.build.build_pass`) with :attr:`read` per sample, the
        bad-sample policy (each pass, one epoch) and ``threads`` worker threads."""
        running = self._pass[0]
        if running is None or running.epoch != epoch or running.next != index:
            _close_pass(self._pass)
            options = PassOptions(self.dataset, self.source.stats, self.batch_size, self.threads, read=self.read)
            engine = build_pass(options, plan, self.source.policy.for_pass(), epoch=epoch, start=index)
            running = self._pass[0] = _Pass(epoch, index, engine)
        try:
            _, samples = next(running.engine)
        except BaseException:  # a bad sample under "raise", or a storage fault: this pass is over
            _close_pass(self._pass)
            raise
        running.next = index + 1
        return samples

    def close(self) -> None:
        """Stop the read threads and close the dataset's files; idempotent."""
        self._finalizer()
        self.dataset.close()


class SampleReader:
    """The outputs of one sample (the table in :class:`DatasetBatches`' docstring), read
    on a pass's worker threads.

    Raises (when called):
        SampleError: a bad sample (no image, a bad label, a required field missing).
    """

    def __init__(self, dataset: IndexedDataset, fields: list[FieldSpec] | None, return_keys: bool,
                 label_dtype: np.dtype) -> None:
        self.dataset = dataset
        self.fields = fields
        self.return_keys = return_keys
        self.label_dtype = label_dtype

    def __call__(self, gid: int) -> tuple[np.ndarray, ...]:
        dataset = self.dataset
        if self.fields is None:
            why = dataset.bad.get(gid)
            if why is not None:
                raise SampleError(*dataset.describe(gid), "fetch", why)
            out = [as_bytes(dataset.view(gid)), np.array([dataset.labels[gid]], self.label_dtype)]
        else:
            present = dataset.member_exts(gid)
            out = []
            for spec in self.fields:
                ext = pick_member(present, spec.exts)
                if ext is None:
                    if not spec.optional:
                        raise SampleError(*dataset.describe(gid), "fetch",
                                          f"no member for field {spec.name!r} ({';'.join(spec.exts)}); "
                                          f"it has {', '.join(present) or 'none'}")
                    out.append(_EMPTY)
                    continue
                payload = dataset.read_member(gid, ext)
                out.append(_EMPTY if payload is None else as_bytes(payload))
        if self.return_keys:
            out.append(np.frombuffer(dataset.sample_name(gid).encode(), np.uint8))
        return tuple(out)


@dataclass
class _Pass:
    """A running pass of :class:`DatasetBatches`: its epoch, the batch it yields next."""

    epoch: int
    next: int
    engine: Engine


def _close_pass(holder: list[_Pass | None]) -> None:
    running, holder[0] = holder[0], None
    if running is not None:
        running.engine.close()
