"""The one shape of turbofeed's registries: a table of named rows, built once at import.

The data formats (``io/registry.py``: ``KINDS``) and the object stores
(``io/stores/families.py``: ``STORES``) are each a :class:`Registry`: look a row up by
name (``KINDS["tar"]``), iterate the names, :meth:`Registry.register` one more. A name
no row has raises a ``KeyError`` that says which names there are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


Row = TypeVar("Row", bound=Named)


class Registry(dict[str, Row]):
    """Rows by their ``name``, in the order they were registered.

    Args:
        what: what a row is, for messages (``"format"``, ``"store"``).
        rows: the rows to register, in order.
    """

    def __init__(self, what: str, rows: Iterable[Row] = ()) -> None:
        super().__init__()
        self.what = what
        for row in rows:
            self.register(row)

    def register(self, row: Row) -> Row:
        """Add ``row`` under its name.

        Raises:
            ValueError: a row of that name is registered already.
        """
        if row.name in self:
            raise ValueError(f"a {self.what} named {row.name!r} is registered already")
        self[row.name] = row
        return row

    def __missing__(self, name: str) -> Row:
        raise KeyError(f"no {self.what} named {name!r} (registered: {', '.join(self)})")
