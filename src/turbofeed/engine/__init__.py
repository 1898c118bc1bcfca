"""The engine: one list of named stages run by one executor over reusable batch slots.

Modules: ``run`` (a pass: :class:`~turbofeed.engine.run.Engine`), ``stream`` (its
per-sample half, batch by batch in plan order), ``stages`` (the stage protocols; the CPU
decode choices), ``choose`` (what the front-ends share, and options -> decode stage),
``decode_gpu``, ``gpu`` and ``hybrid`` (the GPU choices of the decode stage; they import
torch), ``slots`` (batch buffers and their lifecycle), ``work`` (the per-sample CPU
work), ``policy`` (bad samples), ``stats`` and ``timeline`` (what is counted and timed).
The executor, the counters and what a stage declares (``StageInfo``) are in
:mod:`turbofeed.base`, below every package that uses them.
docs/engine.md draws the stages and says what a new capability touches.

This ``__init__`` imports nothing: importing one module of the engine imports only what
that module needs.
"""
