"""``python -m turbofeed``: the same command as the ``turbofeed`` script."""

import sys

from .cli import main

sys.exit(main())
