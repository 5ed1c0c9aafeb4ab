"""Replace the rows of some windows in a window-partitioned table (detail, the compaction quarantine)
with one overwrite commit, retried when a concurrent writer wins.

Two compactions of the same windows write the same rows, so whichever commits last is right, as long
as its delete covers what the other added. pyiceberg's own retry refuses exactly that case (the
other writer's files match the delete filter: ValidationException) and no retry at all fails; either
way nothing landed, so the overwrite is planned again on the new snapshot, whose rows of the windows
it then replaces.
"""

from __future__ import annotations

import logging
import random
import time

import pyarrow as pa
from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import In
from pyiceberg.table import Table

from seqlake.core.errors import CommitConflict
from seqlake.engines.iceberg_writes import overwrite_by_partition
from seqlake.pipelines.commit_failures import committing
from seqlake.tableformat.deletes import nothing_matched_is_fine
from seqlake.tableformat.forgets import ReadPoint, drop_users, fenced_transaction

log = logging.getLogger(__name__)

ATTEMPTS = 6
REPLACED_WHOLE = "a window's rows are replaced whole"


def replace_windows(
    table: Table,
    rows: pa.Table,
    windows: list[int],
    point: ReadPoint,
    snapshot_properties: dict[str, str] | None = None,
) -> None:
    """`table`'s rows of `windows` become `rows`, in one commit, without the rows of users a forget
    removed after the writer's read (`point`): the commit is fenced on that check
    (`seqlake.tableformat.forgets`), and a forget that reaches the table meanwhile makes it check again."""
    what = f"replacing windows {windows[0]}..{windows[-1]} of {'.'.join(table.name())}"
    for attempt in range(ATTEMPTS):
        try:
            with committing(what, why_safe=REPLACED_WHOLE):
                transaction, missed = fenced_transaction(table.refresh(), point)
                with nothing_matched_is_fine():  # a window's first publication replaces nothing
                    overwrite_by_partition(
                        transaction,
                        drop_users(rows, missed),
                        "window_id",
                        In("window_id", windows),
                        snapshot_properties or {},
                    )
                transaction.commit_transaction()
            return
        except (CommitConflict, ValidationException) as error:
            if attempt == ATTEMPTS - 1:
                cause = f"other writers kept replacing the same windows ({error.__cause__ or error})"
                raise CommitConflict(what, cause, why_safe=REPLACED_WHOLE) from error
            log.info("%s: windows replaced concurrently (%s); replacing again", ".".join(table.name()), error)
            time.sleep(random.uniform(0.05, 0.2) * 2**attempt)
