"""What a stage declares: its name, where it runs, what it counts.

A pass (:class:`turbofeed.engine.run.Engine`) is a list of named stages; each declares
one :class:`StageInfo`. It lives here, below ``io``, because streaming's ``fetch.stream``
stage (:mod:`turbofeed.io.stores.stream`) declares one too. The stage protocols that take a
pass's jobs stay in :mod:`turbofeed.engine.stages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class StageInfo:
    """A stage's name (also its threads' and its timers' name), where it runs, what it counts."""

    name: str
    where: Literal["sample", "batch", "sample+batch"]
    counts: tuple[str, ...] = ()
    #: Positions one worker-thread task fills: more than 1 for a stage whose per-sample
    #: work is a few tens of microseconds of Python (the GPU stage's read, header and
    #: window), so a task crosses the executor's queue once for several samples.
    per_task: int = 1
    #: The stage fills ``per_task`` positions in one ``fill_chunk(job, start, stop)``
    #: call (Python once per chunk: :mod:`turbofeed.engine.chunks`), returning the
    #: positions it left for the per-sample ``fill``.
    chunked: bool = False
    #: The per-batch half runs ahead of the consumer in two steps, each on a thread of
    #: its own (``decode_ahead(job)``, then ``resize_ahead(job, decoded)``;
    #: ``complete(job, prepared)`` in the consumer's thread), so a GPU decode overlaps
    #: the consumer's training step and the batch before's resize
    #: (:class:`~turbofeed.engine.stages.AheadStage`).
    ahead: bool = False
