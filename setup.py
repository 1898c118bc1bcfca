"""Builds the optional C extension turbofeed.decode._crop; pyproject.toml holds the metadata.

The extension needs a C compiler and libjpeg(-turbo) headers (Debian: libjpeg62-turbo-dev).
It is optional: without them the build warns and turbofeed uses its pure-Python path.
"""

import sys

from setuptools import Extension, setup

compile_args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fvisibility=hidden"]

setup(
    ext_modules=[
        Extension(
            "turbofeed.decode._crop",
            ["src/turbofeed/decode/_crop.c"],
            libraries=["jpeg"],
            extra_compile_args=compile_args,
            optional=True,
        )
    ]
)
