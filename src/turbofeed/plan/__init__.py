"""Sample order, sharding across ranks, epochs and resume state (pure functions)."""

from .order import EpochPlan, count_batches, epoch_permutation, make_epoch_plan, rank_order
from .resume import check_state, make_state, plan_fingerprint

__all__ = [
    "EpochPlan", "check_state", "count_batches", "epoch_permutation", "make_epoch_plan",
    "make_state", "plan_fingerprint", "rank_order",
]
