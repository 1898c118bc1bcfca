#!/usr/bin/env python3
"""Which wheels install on this Python, before pip is asked (scripts/gpu_check.sh).

One pip call for all the wheels installs none when pip refuses one: a manylinux_2_34
wheel (turbofeed's own, abi3: its native decoder needs glibc 2.34) on an older glibc
would cost KvikIO and simplejpeg too. So each wheel's tags are matched first against the
tags this interpreter installs (pip's own list, from the real glibc), or, with
``--python`` and ``--glibc``, against another machine's (the dry run's guess of the GPU
machine). One line per wheel on stdout, tab-separated:

    fits<TAB>PATH
    refused<TAB>PATH<TAB>why (e.g. "needs glibc >= 2.34, this machine has 2.31")

and the glibc it judged by on stderr. Exit status 0, or 2 for bad arguments.

    python scripts/wheel_fit.py DIR/*.whl
    python scripts/wheel_fit.py --python 3.12 --glibc 2.39 DIR/*.whl
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys

try:  # pip vendors packaging; the GPU machine may not have it on its own
    from packaging.tags import Tag, compatible_tags, cpython_tags, sys_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
except ImportError:  # depends on the machine
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags, sys_tags
    from pip._vendor.packaging.utils import InvalidWheelFilename, parse_wheel_filename


def machine_tags(python: str | None, glibc: str | None) -> tuple[set[Tag], str]:
    """The tags a wheel may carry to install here (or on CPython ``python`` with glibc
    ``glibc``, x86-64), and that glibc version."""
    if python is None:
        return set(sys_tags()), platform.libc_ver()[1] or "unknown"
    assert glibc is not None
    major, minor = (int(v) for v in glibc.split(".")[:2])
    platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    platforms += [p for m, p in ((17, "manylinux2014_x86_64"), (12, "manylinux2010_x86_64"),
                                 (5, "manylinux1_x86_64")) if minor >= m] + ["linux_x86_64"]
    version = tuple(int(v) for v in python.split(".")[:2])
    tags = set(cpython_tags(version, platforms=platforms))
    tags |= set(compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=platforms))
    return tags, glibc


def verdict(path: str, tags: set[Tag], glibc: str) -> str | None:
    """None when the wheel at ``path`` installs with ``tags``, else why not."""
    try:
        _, _, _, wheel_tags = parse_wheel_filename(os.path.basename(path))
    except InvalidWheelFilename as exc:
        return f"not a wheel file name ({exc})"
    if wheel_tags & tags:
        return None
    needs = [tuple(int(v) for v in m.groups()) for t in wheel_tags
             if (m := re.match(r"manylinux_(\d+)_(\d+)_", t.platform))]
    fits_otherwise = {Tag(t.interpreter, t.abi, "linux_x86_64") for t in wheel_tags} & tags
    if needs and fits_otherwise:
        low = min(needs)
        return f"needs glibc >= {low[0]}.{low[1]}, this machine has {glibc}"
    return f"none of its tags ({', '.join(sorted(str(t) for t in wheel_tags))}) installs here"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", help="judge for this CPython version (e.g. 3.12) instead of this one")
    ap.add_argument("--glibc", help="with --python: that machine's glibc (e.g. 2.39)")
    ap.add_argument("wheels", nargs="*")
    args = ap.parse_args()
    if (args.python is None) != (args.glibc is None):
        ap.error("--python and --glibc go together")
    tags, glibc = machine_tags(args.python, args.glibc)
    print(f"wheel_fit.py: judged for glibc {glibc}, {'CPython ' + args.python if args.python else sys.version.split()[0]}",
          file=sys.stderr)
    for path in args.wheels:
        why = verdict(path, tags, glibc)
        print(f"fits\t{path}" if why is None else f"refused\t{path}\t{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
