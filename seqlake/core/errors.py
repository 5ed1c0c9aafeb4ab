"""Every error seqlake raises on purpose: one root, `SeqlakeError`, and a class per kind of failure.

The command line prints any of these as one line (exit status 1) and never a traceback unless
SEQLAKE_DEBUG=1; usage errors (a bad option) are the command line's own and exit with 2. Catch the
precise class: `RunsChanged` is the history table's commit conflict, which the jobs retry on the new
snapshot themselves, and no other error derives from it, so a retry loop that catches it retries
nothing else. `CommitFailed` and its three kinds (`CommitConflict`, `CatalogUnavailable`,
`StoreRefused`) are a commit that did not complete once the job has retried what it safely could.

This module imports nothing, so any module may raise these without loading an engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SeqlakeError(Exception):
    """Base of every error seqlake raises deliberately; the CLI prints these without a traceback."""


# -- configuration and environment ---------------------------------------------------------------


class ConfigError(SeqlakeError):
    """The configuration is invalid; the message names the key and the offending value."""


class UnreadableFileError(ConfigError):
    """A file the command was given (a configuration, an import mapping) cannot be read: a usage error,
    exit status 2, as for any other bad argument."""


class SetupError(SeqlakeError):
    """The environment is incomplete (missing jars, extensions, catalog, warehouse); the message says how
    to fix it."""


class SchemaError(SeqlakeError):
    """An identifier from the user (column, feature group, table) does not exist in the schema."""


# -- tables and files ----------------------------------------------------------------------------


class CorruptFileError(SeqlakeError):
    """A table's data file cannot be read as written: missing, truncated or corrupt. Never rows from it."""

    def __init__(self, table: str, uri: str, problem: str) -> None:
        super().__init__(f"table {table}: file {uri}: {problem}")
        self.table, self.uri, self.problem = table, uri, problem


class FsckError(SeqlakeError):
    """Invariants are broken; the message lists every finding (file or table, invariant, what is wrong)."""

    def __init__(self, findings: Sequence[Any]) -> None:
        super().__init__("\n".join(str(f) for f in findings))
        self.findings = list(findings)


class UnsortedInputError(SeqlakeError):
    """Rows reached the writer out of key order (or with a repeated key)."""


class UnknownFieldId(SeqlakeError):
    """A file's column carries a field id that the table never gave a column of that name."""


class SparkOnlyTable(SeqlakeError):
    """A landing table only Spark's Delta writer can append to (a feature delta-rs does not write)."""


# -- publication ---------------------------------------------------------------------------------


class RunsChanged(SeqlakeError):
    """A commit conflict: a concurrent commit changed the table between our read of its runs and our
    commit. Plan again on the new snapshot; nothing of ours was committed."""


class CommitFailed(SeqlakeError):
    """A commit to a table did not complete. The one line says what failed and why, whether anything of
    it was published, and that running the command again is safe (and why). `published` is False when
    nothing of it was, None when the answer to the commit was lost (it may have been); what the command
    committed before this stays committed."""

    def __init__(self, what: str, cause: str, *, published: bool | None, why_safe: str = "") -> None:
        outcome = (
            "nothing of it was published"
            if published is False
            else "it may have been published before the answer was lost"
        )
        again = "running the command again is safe" + (f": {why_safe}" if why_safe else "")
        super().__init__(f"{what}: {cause}; {outcome}; {again}")
        self.what, self.cause, self.published, self.why_safe = what, cause, published, why_safe


class CommitConflict(CommitFailed):
    """Another writer committed to the table first (pyiceberg's CommitFailedException, delta-rs's
    CommitFailedError, Delta Spark's concurrent-modification errors): nothing of ours was published."""

    def __init__(self, what: str, cause: str, *, published: bool | None = False, why_safe: str = "") -> None:
        super().__init__(what, cause, published=False, why_safe=why_safe)


class CatalogUnavailable(CommitFailed):
    """The catalog stopped answering: a REST catalog that cannot be reached, drops the connection, times
    out or answers with a server error; a SQL catalog's database that fails."""


class StoreRefused(CommitFailed):
    """The object store or file system refused a write: S3's errors, an OSError on the local warehouse
    (no space, no permission), delta-rs's object-store errors."""


class WindowsAlreadyPublished(SeqlakeError):
    """A run would publish a window that a live run already holds."""

    def __init__(self, table: str, windows: set[int]) -> None:
        super().__init__(f"windows {sorted(windows)} are already published in {table}")
        self.windows = windows


class UnknownRunError(SeqlakeError):
    """The requested sorted run is not live in the table's current snapshot."""


class SimulatedCrash(SeqlakeError):
    """Raised at a named point to test that a killed job leaves nothing half done."""


class UsersRemain(SeqlakeError):
    """A table still holds rows of a forgotten user after `forget` (never expected)."""


class ForgetCommitted(SeqlakeError):
    """A forget committed after this job read its input (`seqlake.tableformat.forgets`): what it wrote may
    hold the forgotten users' rows, so it was not committed. Plan again on the new snapshot."""


# -- data in and out -----------------------------------------------------------------------------


class SourceError(SeqlakeError):
    """The event source cannot deliver what ingest needs: a Kafka topic that cannot be reached or does
    not exist, or whose retention dropped messages the lake has not landed yet."""


class PastRequestError(SeqlakeError):
    """Requests given to a capture are older than what the online view already holds: captured now,
    they would see their future. Past requests are backfilled; a replayed live log passes `replay`."""


class ImportDataError(SeqlakeError):
    """The source does not fit its mapping (a missing column, an unmapped action value, ...)."""


class ReadOnlyError(SeqlakeError):
    """A statement would write, attach or load something the read-only analyst session does not allow."""


class SqlError(SeqlakeError):
    """A SQL file or statement failed; the message names the file or statement and quotes DuckDB."""
