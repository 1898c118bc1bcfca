"""The engine: one list of named stages run by one executor over reusable batch slots.

Modules: ``executor`` (the threads every part of turbofeed runs on), ``stages`` (what a
stage declares), ``slots`` (batch buffers and their explicit lifecycle), ``run`` (a pass:
a plan through the stages, batch by batch, in order), ``policy`` (bad samples),
``stats`` (counts and stage times), ``work`` (the per-sample CPU work), ``gpu`` and
``hybrid`` (the GPU choices of the decode stage).

This ``__init__`` imports nothing, so that ``io`` and ``gds`` can use
:mod:`turbofeed.engine.executor` without importing the engine's users back.
"""
