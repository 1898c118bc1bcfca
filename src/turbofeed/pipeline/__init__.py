"""Executor, batch buffers, the bad-sample policy and the sample-level Pipeline."""

from .distributed import DistributedPipeline
from .policy import ON_ERROR, ErrorPolicy
from .samples import Pipeline, Sample
from .stats import Stats

__all__ = ["DistributedPipeline", "ErrorPolicy", "ON_ERROR", "Pipeline", "Sample", "Stats"]
