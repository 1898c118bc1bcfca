"""engine.checked: which samples' JPEG scans were found intact, per source object."""

from __future__ import annotations

import gc
import threading

from turbofeed.engine.checked import CheckedScans


class Shard:  # any object a dataset holds as a source
    pass


def test_marks_are_per_source_and_sample():
    checked, a, b = CheckedScans(), Shard(), Shard()
    assert not checked.intact(a, 3)
    checked.mark(a, 3, 10)
    assert checked.intact(a, 3)
    assert not checked.intact(a, 2) and not checked.intact(a, 4) and not checked.intact(b, 3)
    assert not checked.intact(a, 1000)  # past the source's size: never marked


def test_a_source_opened_anew_starts_unchecked():
    checked = CheckedScans()
    shard = Shard()
    checked.mark(shard, 0, 1)
    del shard
    gc.collect()
    assert len(checked._bits) == 0  # the replaced source's bits went with it
    assert not checked.intact(Shard(), 0)


def test_threads_marking_at_once_never_mark_what_they_did_not():
    checked, shard = CheckedScans(), Shard()
    n = 4096

    def mark(parity: int) -> None:
        for i in range(parity, n, 4):
            checked.mark(shard, i, n)

    threads = [threading.Thread(target=mark, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # a lost mark costs one more check later; a wrong one would let damage through
    assert not any(checked.intact(shard, i) for i in range(n) if i % 4 >= 2)
    assert sum(checked.intact(shard, i) for i in range(n) if i % 4 < 2) > n // 4
