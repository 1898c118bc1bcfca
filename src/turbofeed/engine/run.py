"""One pass of the engine: a plan's batches through the stage list, in order.

``Engine(plan, decode, then=[...])`` runs the decode stage's per-sample half on the
executor's threads (:class:`~turbofeed.engine.stream.BatchStream`: at most ``prefetch``
batches in flight), then, in the consumer's thread, the decode stage's ``finish`` and
each later batch stage (``deliver`` for the DataLoader, ``samples`` for the Pipeline).
A stage whose per-batch half can run ahead (``StageInfo.ahead``: the GPU stage's
batched decode) runs it one batch ahead on a thread of its own (:mod:`.ahead`), the
consumer's thread only completing it.
The front-ends only choose the stages; every path runs here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ..base.stageinfo import StageInfo
from ..plan import EpochPlan
from .policy import PassPolicy
from .ahead import Ahead
from .stages import AheadStage, DecodeStage
from .stream import BatchStream, Job


@dataclass
class BatchStage:
    """A per-batch stage after decode: ``run(job, value) -> value`` in the consumer's thread."""

    info: StageInfo
    run: Callable[[Job, Any], Any]


class FetchAhead(Protocol):
    """A fetch stage that works ahead of the reads (streaming mode's shard downloads):
    told, in the consumer's thread, when every read before a position of the plan is done."""

    info: StageInfo

    def done(self, position: int) -> None: ...

    def close(self) -> None: ...


class Engine:
    """Iterator of ``(job, value)`` for batches ``start..`` of ``plan``: ``value`` is what
    the last stage made of the batch. Closing it (or dropping it) stops its threads.

    Args:
        plan: this rank's epoch.
        decode: the decode stage chosen for this pass.
        policy: the pass's bad-sample policy (shared by the stages).
        then: the batch stages after decode, in order.
        num_workers, prefetch: threads (0: the per-sample half runs in the consumer's
            thread, batch by batch), and batches in flight.
        timeout: seconds one batch's per-sample half may take (0: no limit); longer
            raises :class:`TimeoutError` and the pass stops.
        fetch: a fetch stage working ahead of the reads, told after each batch that
            the batch's positions are read.
    """

    def __init__(self, plan: EpochPlan, decode: DecodeStage, policy: PassPolicy, *,
                 then: Sequence[BatchStage] = (), num_workers: int = 4, prefetch: int = 2,
                 start: int = 0, fetch: FetchAhead | None = None, timeout: float = 0) -> None:
        self.decode = decode
        self.then = list(then)
        self.fetch = fetch
        if fetch is not None:  # dropped without close() (break, garbage): its pins go too
            weakref.finalize(self, fetch.close)
        self.stream = BatchStream(plan, decode, policy, start=start, num_workers=num_workers, prefetch=prefetch,
                                  timeout=timeout)
        # a per-batch half that can run ahead does, on its own thread (engine/ahead.py); not
        # with streaming's fetch stage, which is told in this thread when reads are done
        self.ahead: Ahead | None = None
        if decode.info.ahead and num_workers and fetch is None:
            stage = cast(AheadStage, decode)
            self.ahead = Ahead(self.stream, (stage.decode_ahead, stage.resize_ahead), decode.info.name)
            # its thread holds the stream, so the stream's own finalizer cannot fire: an
            # engine dropped without close() (break, garbage collection) stops it here
            weakref.finalize(self, self.ahead.close)

    @property
    def stages(self) -> list[StageInfo]:
        """The pass's stages in order (``[s.name for s in engine.stages]``)."""
        first = [] if self.fetch is None else [self.fetch.info]
        return [*first, self.decode.info, *(stage.info for stage in self.then)]

    def __iter__(self) -> Engine:
        return self

    def __next__(self) -> tuple[Job, Any]:
        if self.ahead is not None:
            return self._next_ahead(self.ahead)
        try:
            job = next(self.stream)
        except StopIteration:
            if self.fetch is not None:  # every read is done
                self.fetch.close()
            raise
        if self.fetch is not None:  # its reads are done: the shards only it read can go
            self.fetch.done(job.positions.stop)
        try:
            value = self.decode.finish(job)
            for stage in self.then:
                value = stage.run(job, value)
        except BaseException:  # as an error from the threads: the pass ends here
            self.close()
            raise
        return job, value

    def _next_ahead(self, ahead: Ahead) -> tuple[Job, Any]:
        try:
            job, prepared = next(ahead)
            value = cast(AheadStage, self.decode).complete(job, prepared)
            for stage in self.then:
                value = stage.run(job, value)
        except StopIteration:
            raise
        except BaseException:  # as an error from the threads: the pass ends here
            self.close()
            raise
        return job, value

    @property
    def finished(self) -> bool:
        """Every batch was delivered (not merely closed)."""
        return self.stream.finished

    def close(self) -> None:
        """Stop the threads, drop batches in flight, give back held slots; idempotent."""
        if self.ahead is not None:
            self.ahead.close()
        self.stream.close()
        self.decode.close()
        if self.fetch is not None:
            self.fetch.close()
