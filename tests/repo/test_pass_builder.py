"""One builder of a pass (issue 38, item 3): the front-ends (the DataLoader, Pipeline,
the DALI reader) assemble their engines through :func:`turbofeed.engine.build.build_pass`,
and what each does around it stays simple enough to read (branch complexity below 15,
counted as McCabe counts it)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import SimpleNamespace

import pytest

import turbofeed
from turbofeed.dali import batches as dali_batches
from turbofeed.engine import build
from turbofeed.engine.choose import OpenedData
from turbofeed.pipeline import samples
from turbofeed.torch import _iterator


def complexity(function: object) -> int:
    """McCabe's count of ``function``: 1, plus one per branch (``if``, a conditional
    expression, a loop, an ``except``, an ``assert``, a ``case``, each comprehension and its
    conditions) and one per extra operand of ``and``/``or``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    count = 1
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.Assert,
                             ast.match_case)):
            count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
    return count


def test_complexity_counts_branches():
    def flat(a):
        return a

    def branchy(a, b):
        if a and b:
            return [x for x in a if x]
        for _ in b:
            try:
                pass
            except ValueError:
                pass
        return 1 if a else 2

    assert complexity(flat) == 1
    assert complexity(branchy) == 1 + 1 + 1 + 2 + 1 + 1 + 1  # if, and, comprehension + its if, for, except, ifexp


@pytest.mark.parametrize("function", [_iterator._LoaderIterator.__init__, _iterator.pass_options,
                                      samples.Pipeline.start, build.build_pass], ids=lambda f: f.__qualname__)
def test_a_pass_is_assembled_simply(function):
    assert complexity(function) < 15


@pytest.mark.parametrize("front", ["DataLoader", "Pipeline", "DALI reader"])
def test_every_front_end_builds_its_pass_through_the_builder(shards, monkeypatch, front):
    built = []
    real = build.build_pass

    def counting(options, plan, policy, **kw):
        built.append(options)
        return real(options, plan, policy, **kw)

    monkeypatch.setattr(_iterator, "build_pass", counting)
    monkeypatch.setattr(samples, "build_pass", counting)
    monkeypatch.setattr(dali_batches, "build_pass", counting)
    if front == "DALI reader":  # the callable DALI calls: no DALI needed
        source = OpenedData.open(shards, on_error="replace", cache_dir=None, format=None, format_options=None,
                                 storage=None, classes=None)
        reader = dali_batches.DatasetBatches(source, batch_size=40, shuffle=False, seed=0, shard_id=0, num_shards=1)
        assert sum(len(reader(SimpleNamespace(epoch_idx=0, iteration=i))[0]) for i in range(len(reader))) == 120
        reader.close()
    elif front == "DataLoader":
        loader = turbofeed.DataLoader(shards, batch_size=40, num_workers=1)
        assert sum(len(labels) for _, labels in loader) == 120
    else:
        pipe = turbofeed.Pipeline(shards, num_workers=1)
        pipe.start()
        assert len(pipe.next_batch(1000)) == 120
        pipe.stop()
    assert len(built) == 1 and isinstance(built[0], build.PassOptions)
    with pytest.raises(AttributeError):  # frozen: a pass cannot change its front-end's options
        built[0].num_workers = 3  # type: ignore[misc]
