"""Sample order, sharding across ranks, epochs and resume state (pure functions)."""

from .buckets import Buckets, bucket_counts, bucketed_size
from .mixing import EpochDraw, ShardVisits, draw_epoch, quotas
from .order import EpochPlan, Order, count_batches, epoch_permutation, rank_order
from .plans import PLANS, Plan, PlanRequest, make_epoch_plan
from .resume import DataPrint, check_data, check_state, make_state, plan_fingerprint
from .streaming import StreamLayout

__all__ = [
    "Buckets", "DataPrint", "EpochDraw", "EpochPlan", "Order", "PLANS", "Plan", "PlanRequest", "ShardVisits",
    "StreamLayout", "bucket_counts", "bucketed_size", "check_data", "check_state", "count_batches", "draw_epoch", "epoch_permutation",
    "make_epoch_plan", "make_state", "plan_fingerprint", "quotas", "rank_order",
]
