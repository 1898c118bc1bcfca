"""Draw a run's timeline (``turbofeed bench --plot FILE.png``): one lane per worker thread,
coloured by stage (white: idle), and one for the consumer (waiting for a batch, or running
the user's own code), with the bottleneck in words in the title.

matplotlib is optional (``pip install 'turbofeed[plot]'``) and imported only here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from .errors import MissingExtra
from .engine.timeline import CONSUMER_STAGE, Span, Verdict, verdict

YOUR_CODE = "your code"
COLOURS = {  # stage -> colour; stages not listed get grey
    "fetch": "#4c78a8", "decode.cpu": "#f58518", "decode.gpu": "#b279a2", "augment": "#54a24b",
    "collate": "#9d755d", CONSUMER_STAGE: "#e45756", YOUR_CODE: "#72b7b2",
}
LABELS = {CONSUMER_STAGE: "consumer: waiting for a batch", YOUR_CODE: "consumer: your code"}


def require() -> ModuleType:
    """matplotlib with the file-only Agg backend, or :class:`MissingExtra` naming the extra."""
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtra(f"--plot needs the optional package 'matplotlib': pip install 'turbofeed[plot]' "
                           f"({exc})") from exc
    matplotlib.use("Agg")
    return matplotlib


def _natural(name: str) -> list[Any]:
    """``turbofeed-decode.cpu-10`` after ``-9``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def plot_timeline(spans: Iterable[Span], path: str, *, images_per_s: float | None = None,
                  note: str | None = None) -> Verdict:
    """Write the timeline picture of ``spans`` to ``path`` (format from its suffix) and
    return the :class:`Verdict` its title states.

    Raises:
        MissingExtra: matplotlib is not installed.
    """
    require()
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    spans = sorted(spans, key=lambda s: s.t0)
    found = verdict(spans)
    start = spans[0].t0 if spans else 0.0
    consumers = sorted({s.thread for s in spans if s.stage == CONSUMER_STAGE}, key=_natural)
    workers = sorted({s.thread for s in spans} - set(consumers), key=_natural)
    lanes = consumers + workers  # consumer on top
    per_lane: dict[str, list[Span]] = {name: [] for name in lanes}
    for s in spans:
        per_lane[s.thread].append(s)

    lane_h = 0.45 if len(lanes) <= 16 else 0.25
    fig, ax = plt.subplots(figsize=(12, 1.9 + lane_h * max(len(lanes), 1)), dpi=110, layout="constrained")
    used: set[str] = set()
    labels = []
    for y, name in enumerate(reversed(lanes)):
        lane = per_lane[name]
        bars: dict[str, list[tuple[float, float]]] = {}
        for s in lane:
            bars.setdefault(s.stage, []).append((s.t0 - start, s.t1 - s.t0))
        busy = sum(s.t1 - s.t0 for s in lane)
        if name in consumers:  # the gaps between the loader's spans are the user's code
            bars[YOUR_CODE] = [(a.t1 - start, b.t0 - a.t1) for a, b in zip(lane, lane[1:]) if b.t0 > a.t1]
            waited = sum(s.t1 - s.t0 for s in lane if s.stage == CONSUMER_STAGE)
            labels.append(f"consumer ({name})\nwaiting {waited / found.seconds:.0%}" if found.seconds else name)
        else:
            labels.append(f"{name}\nbusy {busy / found.seconds:.0%}" if found.seconds else name)
        for stage, ranges in bars.items():
            if ranges:
                ax.broken_barh(ranges, (y - 0.4, 0.8), facecolors=COLOURS.get(stage, "#bab0ac"), linewidth=0)
                used.add(stage)
    ax.set_yticks(range(len(lanes)), labels, fontsize=8)
    ax.set_ylim(-0.6, max(len(lanes), 1) - 0.4)
    ax.set_xlim(0, found.seconds or 1.0)
    ax.set_xlabel("seconds since the recorded run started")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)

    order = [s for s in COLOURS if s in used] + sorted(used - set(COLOURS))
    handles = [Patch(facecolor=COLOURS.get(s, "#bab0ac"), label=LABELS.get(s, s)) for s in order]
    if workers:
        handles.append(Patch(facecolor="white", edgecolor="#888888", label="worker idle"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7), fontsize=8,
                   frameon=False)
    rate = f"{images_per_s:.0f} images/s, " if images_per_s is not None else ""
    title = f"turbofeed bench: {rate}{len(workers)} worker threads\n{found}"
    if note:
        title += f"\n({note})"
    ax.set_title(title, fontsize=10, loc="left")
    fig.savefig(path)
    plt.close(fig)
    return found
