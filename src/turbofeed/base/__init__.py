"""The bottom of turbofeed: what every other package may use, importing none of them.

Modules: ``executor`` (the one executor: every thread turbofeed starts), ``counters``
(named counts under one lock), ``stageinfo`` (what a stage declares: its name, where it
runs, what it counts), ``ranks`` (rank and world size: arguments, ``torch.distributed``
when already imported, launcher variables), ``threads`` (how many threads a loader
starts) and ``renamed`` (keywords renamed, accepted under the old name for a release).
None imports torch. With ``turbofeed.errors``, ``turbofeed.units``, ``turbofeed._deps``,
``turbofeed.extras`` and ``turbofeed.redact`` this is rank 0 of docs/design.md
("Package ranks"), checked by tests/repo/test_layout.py.

This ``__init__`` imports nothing, so that importing one module of it imports only that.
"""
