"""Engine errors of a commit that did not complete, as the typed errors of `seqlake.core.errors`.

A job wraps each commit in `committing(what, ...)`: a lost race (pyiceberg's CommitFailedException,
delta-rs's CommitFailedError, Delta Spark's concurrent-modification errors), a catalog that stops
answering (requests' connection errors and timeouts, pyiceberg's REST server errors, a SQL catalog's
database errors) and a store that refuses a write (S3's errors, an OSError of the local warehouse,
delta-rs's object-store errors) become `CommitConflict`, `CatalogUnavailable` or `StoreRefused`, with
what failed and whether anything of it was published, which only the commit's own caller knows.

Errors are recognised by their classes, looked up among the modules already imported (an error of a
library that was never imported cannot occur), so this module imports none of them.
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from seqlake.core.errors import CatalogUnavailable, CommitConflict, CommitFailed, SeqlakeError, StoreRefused
from seqlake.core.uris import masked_uri

# Delta Spark's concurrent-modification errors (delta.exceptions), by class name: any of them is a lost race.
DELTA_SPARK_CONFLICTS = frozenset(
    {
        "DeltaConcurrentModificationException",
        "ConcurrentWriteException",
        "MetadataChangedException",
        "ProtocolChangedException",
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
    }
)
# pyiceberg's REST errors that mean the server is not answering properly (not a refusal of the request).
REST_UNAVAILABLE = ("ServerError", "ServiceUnavailableError", "CommitStateUnknownException", "TooManyRequestsError")
# A store's refusals among OSErrors from anywhere: no space or quota, no permission, read-only, I/O error.
STORE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CAUSE_CHARS = 240


def _loaded(module: str, *names: str) -> tuple[type, ...]:
    """The named classes of `module` if it is imported (none otherwise)."""
    found = sys.modules.get(module)
    return tuple(c for c in (getattr(found, n, None) for n in names) if isinstance(c, type))


def _short(text: str) -> str:
    """An engine's message on one line, without colours or delta-rs's arrows, cut to a readable length."""
    text = " ".join(part.strip(" ↳") for part in _ANSI.sub("", text).splitlines() if part.strip(" ↳"))
    return text if len(text) <= _CAUSE_CHARS else text[: _CAUSE_CHARS - 3] + "..."


def _is_delta_spark_conflict(error: BaseException) -> bool:
    if any(cls.__name__ in DELTA_SPARK_CONFLICTS for cls in type(error).__mro__):
        return True
    # A Py4JJavaError that pyspark did not convert names the Java class in its text.
    return type(error).__name__ == "Py4JJavaError" and any(
        f"io.delta.exceptions.{name}" in str(error) for name in DELTA_SPARK_CONFLICTS
    )


def _request_cause(error: BaseException) -> tuple[str, bool]:
    """(why a REST request failed, whether it surely never reached the server)."""
    timeouts = _loaded("requests.exceptions", "ConnectTimeout", "ReadTimeout", "Timeout")
    request = getattr(error, "request", None)
    url = getattr(request, "url", None) or ""
    where = re.match(r"[a-z+]+://[^/]+", url)
    server = f"the catalog {masked_uri(where.group(0))}" if where else "the catalog"
    text = str(error)
    if timeouts and isinstance(error, timeouts[0]):
        return f"{server} did not accept the connection in time (ConnectTimeout)", True
    if timeouts and isinstance(error, timeouts[1:]):
        return f"{server} stopped answering ({type(error).__name__}: no answer in time)", False
    if "NewConnectionError" in text or "Connection refused" in text:
        return f"{server} stopped answering ({type(error).__name__}: connection refused)", True
    if "Connection aborted" in text or "RemoteDisconnected" in text or "reset by peer" in text:
        return f"{server} stopped answering ({type(error).__name__}: the connection was dropped)", False
    return f"{server} stopped answering ({type(error).__name__})", False


def classify(error: BaseException, anywhere: bool = False) -> tuple[type[CommitFailed], str, bool] | None:
    """(the kind of failure, its cause in a few words, whether nothing surely reached the catalog or
    store) for an error of a commit, or None when it is none of the three kinds. `anywhere`: the error
    may come from anything the command did (the command line's last resort), so an OSError counts
    only when it is a store's refusal (no space, no permission, a read-only or failing device)."""
    if isinstance(error, SeqlakeError):
        return None
    conflicts = _loaded("pyiceberg.exceptions", "CommitFailedException") + _loaded(
        "deltalake.exceptions", "CommitFailedError"
    )
    if isinstance(error, conflicts) or _is_delta_spark_conflict(error):
        detail = _short(str(error)).removeprefix("Failed to commit transaction: ").removeprefix("Commit failed: ")
        detail = detail.split(" Help: ")[0].rstrip(".")
        return CommitConflict, f"another writer committed to the table first ({detail})", True
    requests = _loaded("requests.exceptions", "RequestException")
    if requests and isinstance(error, requests):
        cause, unsent = _request_cause(error)
        return CatalogUnavailable, cause, unsent
    rest = _loaded("pyiceberg.exceptions", *REST_UNAVAILABLE)
    if rest and isinstance(error, rest):
        return CatalogUnavailable, f"the REST catalog failed ({type(error).__name__}: {_short(str(error))})", False
    sql = _loaded("sqlalchemy.exc", "OperationalError", "InterfaceError", "InternalError", "DatabaseError")
    sqlite = _loaded("sqlite3", "OperationalError", "DatabaseError")
    if (sql and isinstance(error, sql)) or (sqlite and isinstance(error, sqlite)):
        original = getattr(error, "orig", None) or error
        detail = _short(str(original)).split(" (Background on this error")[0]
        # SQLite's commit is one local transaction: failed, it rolled back. Another database's
        # connection may have dropped after the commit reached it.
        local = bool(sqlite) and isinstance(original, sqlite)
        return CatalogUnavailable, f"the SQL catalog's database failed ({type(original).__name__}: {detail})", local
    boto = _loaded("botocore.exceptions", "BotoCoreError", "ClientError")
    refused = isinstance(error, OSError) and (not anywhere or error.errno in STORE_ERRNOS)
    if (boto and isinstance(error, boto)) or refused:
        detail = _short(str(error)) or type(error).__name__
        timed_out = isinstance(error, TimeoutError) or "timed out" in detail.lower() or "timeout" in detail.lower()
        return StoreRefused, f"the store failed ({type(error).__name__}: {detail})", not timed_out
    return None


def commit_failure(
    error: BaseException, what: str, *, committing: bool = True, why_safe: str = ""
) -> CommitFailed | None:
    """`error` as the typed error of the commit `what`, or None when it is none of the three kinds.
    `committing` False: the error came before the commit was sent (writing its files), so nothing of
    it was published whatever the error."""
    kind = classify(error)
    if kind is None:
        return None
    cls, cause, unsent = kind
    published = False if unsent or not committing else None
    return cls(what, cause, published=published, why_safe=why_safe)


@contextmanager
def committing(what: str, *, why_safe: str = "", sent: bool = True) -> Iterator[None]:
    """Raise an error of the block as the typed error of the commit `what` (seqlake's own errors and
    errors of other kinds pass unchanged). `sent` False: the block only writes files nothing references
    yet, so a failure published nothing."""
    try:
        yield
    except Exception as error:
        failure = commit_failure(error, what, committing=sent, why_safe=why_safe)
        if failure is None:
            raise
        raise failure from error
