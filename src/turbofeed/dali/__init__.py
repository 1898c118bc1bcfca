"""NVIDIA DALI integration: turbofeed's data inside DALI pipelines (see ``docs/dali.md``).

- :func:`reader`: any turbofeed dataset (tar shards, folders, ``s3://``, array formats,
  TFRecord) as the outputs of a DALI pipeline, in the DataLoader's order, resumable with
  DALI's own checkpoints.
- :func:`GPUDirectReader`: every object under an ``s3://`` prefix, once per epoch, read by
  :class:`turbofeed.gds.GPUDirectClient` (the seed documents' reader).

DALI is an optional extra (``pip install 'turbofeed[dali]'``): this package imports
without it; calling a reader without it raises :class:`turbofeed.MissingExtra` (an
ImportError) naming the pip command. :class:`DatasetBatches` and :class:`ObjectBatches`
are the ``external_source`` callables behind them (plain NumPy, no DALI needed).
"""

from ._require import DALI_FIX
from .batches import DatasetBatches
from .objects import GPUDirectReader, ObjectBatches
from .reader import reader

__all__ = ["DALI_FIX", "DatasetBatches", "GPUDirectReader", "ObjectBatches", "reader"]
