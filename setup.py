"""Builds the optional C extension turbofeed.decode._crop; pyproject.toml holds the metadata.

The extension needs a C compiler and libjpeg(-turbo) headers (Debian: libjpeg62-turbo-dev).
It is optional: without them the build prints a warning block saying why and how to get
it (pip shows build output only with -v; the loader also warns once at run time), and
turbofeed uses its pure-Python paths, about 2x slower to decode and 5x slower to build a dataset index.
"""

import contextlib
import os
import shutil
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

compile_args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fvisibility=hidden"]

# The same commands as turbofeed.decode.native.BUILD_FIX (setup.py cannot import the package).
FIX = ("Debian: apt-get install gcc libjpeg62-turbo-dev   (Ubuntu: libjpeg-turbo8-dev; "
       "Fedora: dnf install gcc libjpeg-turbo-devel)",
       "then:   pip install --force-reinstall --no-deps --no-cache-dir turbofeed   (a checkout: pip install -e .)")


def not_built_message(reason: str) -> str:
    """The warning block printed when the optional extension cannot be built."""
    bar = "=" * 78
    return "\n".join([
        bar,
        "WARNING: turbofeed's native JPEG decoder (turbofeed.decode._crop) was NOT built:",
        f"  {reason}.",
        "turbofeed works without it, but decodes JPEGs about 2x slower and builds dataset indexes",
        "about 5x slower (its Python paths).",
        "To get it, install a C compiler and the libjpeg-turbo headers, then reinstall:",
        f"  {FIX[0]}",
        f"  {FIX[1]}",
        "`turbofeed doctor` shows which fast paths are on.",
        bar,
    ])


def why_not_built(error: Exception, compiler: str | None, finds_header) -> str:
    """Why the build failed, in words: no compiler, no jpeglib.h, or the compiler's error.

    Args:
        error: what setuptools raised.
        compiler: the C compiler command (None where setuptools does not say, e.g. MSVC).
        finds_header: a callable, True when the compiler finds ``jpeglib.h``.
    """
    if compiler is not None and shutil.which(compiler) is None:
        return f"no C compiler ({compiler} not found)"
    if not finds_header():
        return "the libjpeg headers are missing (jpeglib.h not found)"
    return f"compiling it failed ({error}; the compiler's output above says why)"


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the compiler's errors of a probe) for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class BuildExt(build_ext):
    """build_ext that says loudly, on stderr, why an optional extension was not built."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except (CCompilerError, BaseError) as exc:
            if ext.optional:
                command = getattr(self.compiler, "compiler_so", None)
                reason = why_not_built(exc, command[0] if command else None, lambda: self._finds_header(ext))
                sys.stderr.write(f"\n{not_built_message(reason)}\n\n")
                sys.stderr.flush()
            raise  # setuptools skips an optional extension and goes on

    def _finds_header(self, ext) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "probe.c")
            with open(source, "w") as f:
                f.write("#include <stddef.h>\n#include <stdio.h>\n#include <jpeglib.h>\n")
            try:
                with _quiet_stderr():
                    self.compiler.compile([source], output_dir=tmp, include_dirs=ext.include_dirs)
            except (CCompilerError, BaseError):
                return False
        return True


# The extension's C files: module*.c hold the CPython bindings; the others use no Python
# (tests/decode/test_fuzz_native.py builds them into a sanitizer fuzz run).
CSRC = "src/turbofeed/decode/csrc"
SOURCES = [f"{CSRC}/{name}" for name in ("module.c", "module_args.c", "module_index.c", "module_chunk.c",
                                          "module_read.c", "chunk.c", "jpeg_window.c", "resample.c", "kernels.c",
                                          "tarindex.c", "jpeg_sizes.c", "windows.c")]
HEADERS = [f"{CSRC}/{name}" for name in ("jpeg_window.h", "kernels.h", "layout.h", "resample.h", "module.h",
                                         "module_index.h", "module_chunk.h", "chunk.h", "windows.h",
                                         "tarindex.h", "jpeg_sizes.h")]

# The stable ABI (abi3) of CPython 3.11, where the buffer protocol joined the limited API:
# one wheel, tagged cp311-abi3, installs on 3.11, 3.12, 3.13... with no compiler. On 3.10
# (no buffer protocol in the limited API) the extension is built for that version only.
LIMITED_API = sys.version_info >= (3, 11) and sys.implementation.name == "cpython"
macros = [("Py_LIMITED_API", "0x030B0000")] if LIMITED_API else []
options = {"bdist_wheel": {"py_limited_api": "cp311"}} if LIMITED_API else {}

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "turbofeed.decode._crop",
            SOURCES,
            depends=HEADERS,
            libraries=["jpeg"],
            define_macros=macros,
            extra_compile_args=compile_args,
            py_limited_api=LIMITED_API,
            optional=True,
        )
    ],
    options=options,
)
