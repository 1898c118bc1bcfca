"""The old name of :mod:`turbofeed.io.stores`, kept for one release.

The object store package was ``turbofeed.io.s3`` while it held S3 alone; it holds every
store now (S3, GCS, Azure, https), so it is ``turbofeed.io.stores``. docs/storage.md
showed ``from turbofeed.io.s3.config import configure``, so the old path still works:
importing it warns once (a ``DeprecationWarning`` naming the new path) and makes each
``turbofeed.io.s3.<module>`` the very module ``turbofeed.io.stores.<module>`` (one
``S3Config`` class, one shared client), not a copy.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

NEW = "turbofeed.io.stores"

# stacklevel 2: the importing line (warnings skips the import machinery's frames)
warnings.warn(f"turbofeed.io.s3 is now {NEW} (it holds every object store): import from {NEW}; "
              "the old name goes in the next release", DeprecationWarning, stacklevel=2)

#: Old module name -> its name in the new package, where it changed.
MOVED = {"stores": "families"}

_stores = importlib.import_module(NEW)
_names = {m.name: m.name for m in pkgutil.iter_modules(_stores.__path__)} | MOVED
for _old, _new in _names.items():
    _real = importlib.import_module(f"{NEW}.{_new}")
    sys.modules[f"{__name__}.{_old}"] = _real  # `import turbofeed.io.s3.config` finds it here
    globals()[_old] = _real
