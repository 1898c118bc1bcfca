"""The sample-level front-end: ``Pipeline``, ``DistributedPipeline`` and ``Sample``.

``Stats``, ``ErrorPolicy`` and ``ON_ERROR`` live in :mod:`turbofeed.engine` and are
re-exported here, where users of the Pipeline look for them.
"""

from ..engine.policy import ON_ERROR, ErrorPolicy
from ..engine.stats import Stats
from .distributed import DistributedPipeline
from .samples import Pipeline, Sample

__all__ = ["DistributedPipeline", "ErrorPolicy", "ON_ERROR", "Pipeline", "Sample", "Stats"]
