"""turbofeed on Ray Data: decode on any node's cores, batches for a ``TorchTrainer``,
exact resume (docs/ray.md). Optional: ``pip install 'turbofeed[ray]'``.

- :func:`read`: one epoch of turbofeed data as a ``ray.data.Dataset`` (read tasks of
  contiguous ranges of the epoch's order; decoded by an actor pool with a transform);
- :class:`Decode`: the ``map_batches`` class that decodes on the actors;
- :func:`loader` / :class:`RayLoader`: the trainer's batches and its ``state_dict``.
"""

from __future__ import annotations

from .decode import Decode
from .loader import RayLoader, loader
from .positions import Consumed
from .read import merged, read

__all__ = ["Consumed", "Decode", "RayLoader", "loader", "merged", "read"]
