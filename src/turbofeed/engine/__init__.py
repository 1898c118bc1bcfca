"""The engine: one list of named stages run by one executor over reusable batch slots.

Modules: ``executor`` (the threads every part of turbofeed runs on), ``run`` (a pass:
:class:`~turbofeed.engine.run.Engine`), ``stream`` (its per-sample half, batch by batch
in plan order), ``stages`` (what a stage declares; the CPU decode choices), ``choose``
(what the front-ends share, and options -> decode stage), ``decode_gpu``, ``gpu`` and
``hybrid`` (the GPU choices of the decode stage; they import torch), ``slots`` (batch
buffers and their lifecycle), ``work`` (the per-sample CPU work), ``policy`` (bad
samples), ``stats``, ``counters`` and ``timeline`` (what is counted and timed).
docs/engine.md draws the stages and says what a new capability touches.

This ``__init__`` imports nothing, so that ``io`` and ``gds`` can use
:mod:`turbofeed.engine.executor` and :mod:`turbofeed.engine.counters` without
importing the engine's users back.
"""
