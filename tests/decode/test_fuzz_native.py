"""The native decoder's C core under AddressSanitizer and UBSan: ``fuzz_native.c`` (random
crops of random images through the pure resampler; intact, truncated and corrupt JPEGs
through the window decoder; random, cut and corrupt tars and JPEGs through the dataset
index's reads, see its header) built from the extension's own C files, bar the Python
bindings, against the libjpeg setup.py links, and run for two seeds.

Each seed runs up to ITERATIONS iterations (about 9 s on the 2-core test machine) and
stops after SECONDS on a slower one; a failure names the seed, and rerunning
``fuzz_native SEED ITERATIONS`` repeats it exactly. Skips only without a C compiler or
the libjpeg headers (then the extension cannot build either); a compiler without the
sanitizer runtimes fails it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "src" / "turbofeed" / "decode" / "csrc"
HARNESS = Path(__file__).with_name("fuzz_native.c")
FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1", "-ffp-contract=off"]
SEEDS = (1, 2)
ITERATIONS = 4000
SECONDS = 20
MIN_ITERATIONS = 300
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1"}


def _compiler() -> list[str]:
    """The C compiler setuptools would use ($CC, else Python's build-time CC)."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _env_flags(*names: str) -> list[str]:
    """$CPPFLAGS, $CFLAGS, $LDFLAGS: setuptools passes them to the extension's build too."""
    return [flag for name in names for flag in shlex.split(os.environ.get(name, ""))]


def _core_sources() -> list[Path]:
    """The extension's C files but the bindings (module*.c): what the fuzz run links."""
    return sorted(p for p in CSRC.glob("*.c") if not p.name.startswith("module"))


def test_the_fuzz_run_builds_the_files_setup_py_builds():
    line = re.search(r"^SOURCES = .*?\)\]$", (ROOT / "setup.py").read_text(), re.M | re.S)
    assert line, "setup.py has no SOURCES = [...] line"
    built = set(re.findall(r'"(\w+\.c)"', line.group()))
    assert built == {p.name for p in _core_sources()} | {"module.c", "module_args.c", "module_index.c", "module_chunk.c",
                                                                  "module_read.c"}, built


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory) -> Path:
    """fuzz_native.c and the core C files built with ASan and UBSan."""
    cc = _compiler()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]} not found): the native extension cannot be built here either")
    probe = subprocess.run([*cc, *_env_flags("CPPFLAGS", "CFLAGS"), "-E", "-x", "c", "-"], capture_output=True,
                           text=True, input="#include <stddef.h>\n#include <stdio.h>\n#include <jpeglib.h>\n")
    if probe.returncode != 0:
        pytest.skip("the libjpeg headers are missing (jpeglib.h not found): the native extension cannot be "
                    "built here either")
    out = tmp_path_factory.mktemp("fuzz") / "fuzz_native"
    command = [*cc, *FLAGS, *_env_flags("CPPFLAGS", "CFLAGS"), f"-I{CSRC}", *map(str, _core_sources()),
               str(HARNESS), "-o", str(out), *_env_flags("LDFLAGS"), "-ljpeg", "-lm"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (f"building the sanitizer fuzz run failed (a compiler without the ASan/UBSan "
                                  f"runtimes? gcc ships them):\n$ {shlex.join(command)}\n{done.stderr[-4000:]}")
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_random_crops_and_damaged_jpegs_under_sanitizers(fuzzer, seed):
    done = subprocess.run([str(fuzzer), str(seed), str(ITERATIONS), str(SECONDS)], capture_output=True, text=True,
                          timeout=SECONDS + 120, env={**os.environ, **SANITIZER_ENV})
    report = f"$ {fuzzer.name} {seed} {ITERATIONS}\n{done.stdout[-2000:]}\n{done.stderr[-8000:]}"
    assert done.returncode == 0, report
    for sign in ("runtime error", "AddressSanitizer", "LeakSanitizer"):
        assert sign not in done.stderr, report
    summary = re.search(r"(\d+) iterations; resample ok (\d+) value \d+ too_large \d+; jpeg ok (\d+) jpeg_error (\d+)",
                        done.stdout)
    assert summary, report
    iterations, resample_ok, jpeg_ok, jpeg_error = map(int, summary.groups())
    assert iterations >= MIN_ITERATIONS, report  # even a slow machine gets through this many
    # every part ran: good crops (two calls each), intact JPEGs, corrupt ones refused
    assert resample_ok > iterations and jpeg_ok > iterations / 2 and jpeg_error > iterations / 10, report
    index = re.search(r"tar plain (\d+) not_plain (\d+), sizes ok (\d+) none (\d+)", done.stdout)
    assert index and all(int(n) > iterations / 20 for n in index.groups()), report  # the index's reads ran too
