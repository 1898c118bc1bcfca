"""`turbofeed bench --plot`: the timeline recorder, the bottleneck verdict and the picture."""

from __future__ import annotations

import subprocess
import sys

import pytest

from turbofeed.engine.stats import Stats
from turbofeed.engine.timeline import Span, Timeline, verdict


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    from turbofeed._datagen import make_imagenet_like

    out = str(tmp_path_factory.mktemp("plot") / "ds")
    make_imagenet_like(out, count=64, per_shard=32, progress=False)
    return out


def _workers(stage_of, n: int = 2, seconds: float = 10.0, step: float = 0.01, busy: float = 1.0) -> list[Span]:
    """Spans of ``n`` worker threads over ``seconds``: each ``step`` holds one sample's
    stages (``stage_of(i)`` -> [(stage, share of the step)]), busy ``busy`` of the step."""
    spans = []
    for w in range(n):
        t = 0.0
        for i in range(int(seconds / step)):
            start = t
            for stage, share in stage_of(i):
                spans.append(Span(f"turbofeed-decode.cpu-{w}", stage, start, start + share * busy * step))
                start += share * busy * step
            t += step
    return spans


def _consumer(seconds: float = 10.0, batch: float = 0.1, waiting: float = 0.9) -> list[Span]:
    """The consumer waits ``waiting`` of each ``batch`` period; the rest is its own code."""
    return [Span("MainThread", "wait", i * batch, i * batch + waiting * batch)
            for i in range(int(seconds / batch))]


def test_verdict_decode_bound():
    spans = _workers(lambda i: [("fetch", 0.05), ("decode.cpu", 0.85), ("collate", 0.07)]) + _consumer(waiting=0.9)
    v = verdict(spans)
    assert v.bound == "decode-bound"
    assert v.worker_busy == pytest.approx(0.97, abs=0.01)
    assert v.consumer_wait == pytest.approx(0.9, abs=0.01)
    assert "decode-bound" in str(v) and "workers busy 97%" in str(v) and "consumer waiting 90%" in str(v)


def test_verdict_io_bound():
    spans = _workers(lambda i: [("fetch", 0.7), ("decode.cpu", 0.2), ("collate", 0.05)]) + _consumer(waiting=0.8)
    v = verdict(spans)
    assert v.bound == "I/O-bound" and "I/O-bound" in str(v)


def test_verdict_consumer_bound():
    # workers mostly idle, the consumer almost never waits: the user's own code is the bottleneck
    spans = _workers(lambda i: [("fetch", 0.1), ("decode.cpu", 0.9)], busy=0.3) + _consumer(waiting=0.02)
    v = verdict(spans)
    assert v.bound == "consumer-bound"
    assert v.worker_busy == pytest.approx(0.3, abs=0.01)
    assert "consumer waiting 2%" in str(v) and "your code" in str(v)


def test_verdict_without_spans():
    assert verdict([]).bound == "unknown"


def test_timeline_caps_its_spans_and_says_so(caplog):
    timeline = Timeline(cap=5)
    for _ in range(4):
        timeline.ending_now({"decode_cpu": 0.002, "augment": 0.001})
    spans = timeline.spans()
    assert len(spans) == 5 and timeline.dropped == 3 and timeline.full
    assert "5 spans" in (timeline.note() or "")
    assert sum("timeline" in r.getMessage() for r in caplog.records) == 1  # said once
    # consecutive stages end where the next starts, named with dots, on this thread
    decode, augment = spans[0], spans[1]
    assert (decode.stage, augment.stage) == ("decode.cpu", "augment")
    assert decode.t1 == pytest.approx(augment.t0) and augment.t1 - decode.t0 == pytest.approx(0.003)
    assert decode.thread == "MainThread"
    assert Timeline().note() is None


def test_timeline_is_off_by_default(dataset):
    pytest.importorskip("torch")
    import turbofeed

    assert Stats().timeline is None
    loader = turbofeed.DataLoader(dataset, batch_size=16, num_workers=2,
                                  transform=turbofeed.transforms.imagenet_eval(32))
    for _ in loader:
        pass
    assert loader.stats.timeline is None and loader.stats.seconds["decode.cpu"] > 0


def test_timeline_records_worker_and_consumer_spans(dataset):
    pytest.importorskip("torch")
    import turbofeed

    loader = turbofeed.DataLoader(dataset, batch_size=16, num_workers=2,
                                  transform=turbofeed.transforms.imagenet_eval(32))
    loader.stats.timeline = Timeline()
    for _ in loader:
        pass
    spans = loader.stats.timeline.spans()
    workers = {s.thread for s in spans if s.stage == "decode.cpu"}
    assert workers and all(t.startswith("turbofeed-decode.cpu-") for t in workers)
    # one fetch span per task: a chunk of positions (engine/chunks.py), a batch of 16 here
    from turbofeed.engine.chunks import chunk_size

    assert chunk_size(16, 2) == 16 and sum(s.stage == "fetch" for s in spans) == 64 // 16
    assert sum(s.stage == "wait" for s in spans) == 4  # one per batch, on the caller's thread
    assert all(s.t1 >= s.t0 for s in spans)


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path):
    import turbofeed
    from turbofeed import _plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(turbofeed.MissingExtra, match=r"pip install 'turbofeed\[plot\]'"):
        _plot.plot_timeline([], str(tmp_path / "x.png"))


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turbofeed", "bench", *args], capture_output=True,
                          text=True, timeout=300)


def test_bench_plot_writes_a_png(dataset, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from PIL import Image

    out = tmp_path / "timeline.png"
    done = _bench(dataset, "--plot", str(out), "--epochs", "1", "--warmup", "0", "--batch-size", "16",
                  "--workers", "2", "--size", "64")
    assert done.returncode == 0, done.stderr
    assert str(out) in done.stdout
    assert "-bound" in done.stdout  # the verdict in words
    with Image.open(out) as image:
        image.verify()
    with Image.open(out) as image:
        assert image.format == "PNG"
        width, height = image.size
        assert 800 <= width <= 3000 and 300 <= height <= 3000


def test_bench_plot_into_a_missing_folder_is_one_error_line(dataset, tmp_path):
    done = _bench(dataset, "--plot", str(tmp_path / "nope" / "t.png"), "--epochs", "1", "--warmup", "0")
    assert done.returncode == 2
    assert done.stderr.startswith("turbofeed: error:") and done.stderr.count("\n") == 1
    assert "--plot" in done.stderr and "no such folder" in done.stderr
