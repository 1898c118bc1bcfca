"""Writing one benchmark's block into bench/RESULTS.md, leaving the other blocks as they are."""

from __future__ import annotations

import os
import re


def write_block(path: str, block: str) -> None:
    """Replace the block between ``block``'s first line (``<!-- name:begin -->``) and last
    line (``<!-- name:end -->``) in the file at ``path``, or append it when absent."""
    lines = block.strip("\n").splitlines()
    begin, end = lines[0], lines[-1]
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)
