"""Dict batches of general samples (``fields=``): each field's values collated.

======================================  =====================================
values of a field in one batch          the batch holds
======================================  =====================================
all ints (``cls``)                      an int64 tensor
all floats                              a float64 tensor
arrays/tensors of one shape and dtype   one stacked tensor (images: N, 3, H, W)
anything else (str, dict, ragged, None) a list, in batch order
======================================  =====================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def collate(values: Sequence[Any]) -> Any:
    """One field's values for a batch (see the module table)."""
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return torch.tensor(values, dtype=torch.int64)
    if values and all(isinstance(v, float) for v in values):
        return torch.tensor(values, dtype=torch.float64)
    if values and all(isinstance(v, np.ndarray) for v in values):
        if all(v.shape == values[0].shape and v.dtype == values[0].dtype for v in values):
            return torch.from_numpy(np.stack(values))  # one copy, also of read-only arrays
        return [torch.from_numpy(np.array(v)) for v in values]
    if values and all(isinstance(v, (np.ndarray, torch.Tensor)) for v in values):
        tensors = [torch.as_tensor(v) for v in values]
        first = tensors[0]
        if all(t.shape == first.shape and t.dtype == first.dtype for t in tensors):
            return torch.stack(tensors)
        return tensors
    return list(values)


def field_batch(names: Sequence[str], image: Any, fields: Sequence[dict[str, Any]],
                described: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The dict batch: ``image`` (when asked for), each other field collated (the ones
    asked for, then any a ``map`` added), then ``__key__`` (the WebDataset key) and
    ``__url__`` (the shard) of every sample."""
    batch: dict[str, Any] = {}
    added = [k for f in fields for k in f if k not in names]
    for name in [*names, *dict.fromkeys(added)]:
        if name == "image":
            batch[name] = image
        else:
            batch[name] = collate([f.get(name) for f in fields])
    batch["__key__"] = [key for _, key in described]
    batch["__url__"] = [url for url, _ in described]
    return batch
