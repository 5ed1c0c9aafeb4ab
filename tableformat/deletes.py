"""pyiceberg's deletes and overwrites, whose filter may rightly match nothing.

pyiceberg warns (UserWarning) when a delete matches no rows. seqlake's filters often do, by design:
the first publication of a window has nothing to replace, and a forget or a rebuild that races
another may find its rows gone. Each caller checks what it needs afterwards; the warning would only
be noise on every command.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

NOTHING_MATCHED = "Delete operation did not match any records"


@contextmanager
def nothing_matched_is_fine() -> Iterator[None]:
    """Inside: pyiceberg's warning that a delete matched no rows is not shown (other warnings are)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NOTHING_MATCHED, category=UserWarning)
        yield
