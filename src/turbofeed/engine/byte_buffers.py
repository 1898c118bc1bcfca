"""Host buffers for the bytes of chunks, reused from one chunk to the next.

A chunk on the GPU feeding path reads its samples' bytes into one host buffer
(:meth:`~turbofeed.engine.chunk_reads.ChunkReader.read`) that lives until the decoder has
taken them. A new buffer for every chunk costs twice: the kernel maps and zeroes each
fresh page as the read first touches it, and freeing the buffer (``munmap``) waits on
the process's memory-map lock while the other feeding threads fault pages into theirs.
On the 2-core development VM the consumer's thread stalled about 5 ms a batch dropping
the last batch's buffers, and the emulated GPU feed reached 0.72 of the stand-in nvJPEG
rate against 0.91-0.95 with the buffers reused (bench/RESULTS.md, "Reused chunk buffers").

A buffer comes back with the event that marks the end of the device work reading it
(the decoder's copy from it: torchvision's and nvImageCodec's decoders order their work
on the caller's current stream, so an event recorded there after the call covers it)
and is handed out again only once that event has completed: a reused buffer is never
written under a copy still queued. Without a device (None) it is free at once.

The pool keeps no more free buffers than were ever out at once, so it holds at most
twice the bytes in flight at the busiest moment; it dies with the pass that made it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

#: a new buffer is this much larger than asked (rounded up to a MiB), so the next
#: chunks, whose sizes differ by a few percent, fit it
_HEADROOM = 1.25
_MIB = 1 << 20


class ByteBuffers:
    """uint8 host buffers handed out by size and given back after use (the module
    docstring); safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[tuple[np.ndarray, Any]] = []  # (buffer, event or None)
        self._out = 0  # handed out, not given back
        self._most_out = 0
        #: buffers allocated so far (the rest of the takes reused one)
        self.made = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes``: a view of a free buffer at least that large whose
        device work is done (the smallest such), or of a new one."""
        with self._lock:
            self._out += 1
            self._most_out = max(self._most_out, self._out)
            best = -1
            for k, (buffer, done) in enumerate(self._free):
                if len(buffer) >= nbytes and (best < 0 or len(buffer) < len(self._free[best][0])) \
                        and (done is None or done.query()):
                    best = k
            if best >= 0:
                return self._free.pop(best)[0][:nbytes]
            self.made += 1
        size = -(-int(nbytes * _HEADROOM) // _MIB) * _MIB
        return np.empty(max(size, nbytes), np.uint8)[:nbytes]

    def give(self, views: list[np.ndarray], done: Any = None) -> None:
        """Give back arrays :meth:`take` returned; ``done``: the event after which no
        device work reads them (a ``torch.cuda.Event``), or None: nothing does."""
        with self._lock:
            for view in views:
                assert view.base is not None, "not a view ByteBuffers.take returned"
                self._out -= 1
                self._free.append((view.base, done))
            if len(self._free) > self._most_out:  # a chunk larger than the rest made one more
                self._free.sort(key=lambda entry: len(entry[0]))
                del self._free[:len(self._free) - self._most_out]

    def __len__(self) -> int:
        """Free buffers held."""
        with self._lock:
            return len(self._free)
