"""One pass of the engine: a plan's batches through the stage list, in order.

``Engine(plan, decode, then=[...])`` runs the decode stage's per-sample half on the
executor's threads (:class:`~turbofeed.engine.stream.BatchStream`: at most ``prefetch``
batches in flight), then, in the consumer's thread, the decode stage's ``finish`` and
each later batch stage (``deliver`` for the DataLoader, ``samples`` for the Pipeline).
The front-ends only choose the stages; every path runs here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..plan import EpochPlan
from .policy import PassPolicy
from .stages import DecodeStage, StageInfo
from .stream import BatchStream, Job


@dataclass
class BatchStage:
    """A per-batch stage after decode: ``run(job, value) -> value`` in the consumer's thread."""

    info: StageInfo
    run: Callable[[Job, Any], Any]


class Engine:
    """Iterator of ``(job, value)`` for batches ``start..`` of ``plan``: ``value`` is what
    the last stage made of the batch. Closing it (or dropping it) stops its threads.

    Args:
        plan: this rank's epoch.
        decode: the decode stage chosen for this pass.
        policy: the pass's bad-sample policy (shared by the stages).
        then: the batch stages after decode, in order.
        num_workers, prefetch: threads, and batches in flight.
    """

    def __init__(self, plan: EpochPlan, decode: DecodeStage, policy: PassPolicy, *,
                 then: Sequence[BatchStage] = (), num_workers: int = 4, prefetch: int = 2,
                 start: int = 0) -> None:
        self.decode = decode
        self.then = list(then)
        self.stream = BatchStream(plan, decode, policy, start=start, num_workers=num_workers, prefetch=prefetch)

    @property
    def stages(self) -> list[StageInfo]:
        """The pass's stages in order (``[s.name for s in engine.stages]``)."""
        return [self.decode.info, *(stage.info for stage in self.then)]

    def __iter__(self) -> Engine:
        return self

    def __next__(self) -> tuple[Job, Any]:
        job = next(self.stream)
        try:
            value = self.decode.finish(job)
            for stage in self.then:
                value = stage.run(job, value)
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
        self.stream.close()
        self.decode.close()
