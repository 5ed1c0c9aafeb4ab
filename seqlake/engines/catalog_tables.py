"""A table of a pyiceberg catalog that may not exist yet, loaded with one metadata read.

pyiceberg's `Catalog.table_exists` loads the table (reads and parses its metadata file, every
snapshot of it) and drops it: asked before `load_table`, it doubles the cost of opening a table,
which on a table of many snapshots is tens of milliseconds a job step.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table


def load_table_if_exists(catalog: Catalog, identifier: str) -> Table | None:
    """The table `identifier`, or None when the catalog has no such table."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None
