"""A CPU stand-in for the GPU decoder, so everything around nvJPEG is tested without a GPU
(``turbofeed.testing.CpuStandInDecoder``, which the GPU check's dry run uses too)."""

from __future__ import annotations

import pytest

from turbofeed.testing import CpuStandInDecoder


@pytest.fixture
def stand_in() -> CpuStandInDecoder:
    """A fresh :class:`CpuStandInDecoder`."""
    return CpuStandInDecoder()
