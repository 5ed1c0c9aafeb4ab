"""Engine errors of a commit that did not complete become the typed errors of seqlake.core.errors
(`seqlake.pipelines.commit_failures`): real conflicts of delta-rs and pyiceberg, a REST catalog that
refuses the connection or answers too late, a SQL catalog's database error and S3's, each with whether
anything was published."""

from __future__ import annotations

import errno
import sqlite3

import pyarrow as pa
import pytest
import requests
from botocore.exceptions import ClientError
from sqlalchemy.exc import OperationalError

from seqlake.core.errors import (
    CatalogUnavailable,
    CommitConflict,
    CommitFailed,
    RunsChanged,
    StoreRefused,
)
from seqlake.pipelines.commit_failures import classify, committing
from tests.server_process import free_port


def _raised(block, what: str = "committing it", sent: bool = True) -> CommitFailed:
    with pytest.raises(CommitFailed) as caught, committing(what, why_safe="it lands once", sent=sent):
        block()
    return caught.value


def test_a_lost_delta_rs_race_is_a_conflict_that_published_nothing(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(tmp_path, pa.table({"u": [1, 2]}))
    read_before = DeltaTable(tmp_path)
    DeltaTable(tmp_path).delete("u = 1")  # another writer, meanwhile
    failure = _raised(lambda: read_before.delete("u = 2"))
    assert isinstance(failure, CommitConflict) and failure.published is False
    assert str(failure).startswith("committing it: another writer committed to the table first (")
    assert str(failure).endswith("; nothing of it was published; running the command again is safe: it lands once")
    assert "\n" not in str(failure) and "Help:" not in str(failure)


def test_a_lost_pyiceberg_race_is_a_conflict():
    from pyiceberg.exceptions import CommitFailedException

    def lost() -> None:  # what pyiceberg raises once its own retries of an append are spent
        raise CommitFailedException("Requirement failed: branch main has changed: expected id 1, found 2")

    failure = _raised(lost)
    assert isinstance(failure, CommitConflict) and failure.published is False
    assert "(Requirement failed: branch main has changed: expected id 1, found 2)" in failure.cause


def test_a_rest_catalog_that_refuses_the_connection_published_nothing():
    failure = _raised(lambda: requests.post(f"http://127.0.0.1:{free_port()}/v1/namespaces/n/tables/t", timeout=5))
    assert isinstance(failure, CatalogUnavailable) and failure.published is False
    assert "the catalog http://127.0.0.1:" in failure.cause and "connection refused" in failure.cause


def test_an_answer_that_never_came_may_have_been_published():
    def late() -> None:
        raise requests.exceptions.ReadTimeout("HTTPConnectionPool(host='x', port=1): Read timed out.")

    failure = _raised(late)
    assert isinstance(failure, CatalogUnavailable) and failure.published is None
    assert "it may have been published before the answer was lost" in str(failure)
    assert _raised(late, sent=False).published is False  # only files written: nothing to publish


def test_a_sql_catalog_database_error_on_sqlite_rolled_back():
    def locked() -> None:
        raise OperationalError("UPDATE iceberg_tables ...", {}, sqlite3.OperationalError("database is locked"))

    failure = _raised(locked)
    assert isinstance(failure, CatalogUnavailable) and failure.published is False
    assert "database is locked" in failure.cause and "Background on this error" not in str(failure)


def test_a_store_that_refuses_a_write_is_store_refused():
    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def denied() -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")

    assert isinstance(_raised(full), StoreRefused)
    assert "No space left on device" in _raised(full).cause
    assert isinstance(_raised(denied), StoreRefused) and "AccessDenied" in _raised(denied).cause


def test_seqlake_errors_and_other_errors_pass_unchanged():
    for error in (RunsChanged("the runs changed"), ValueError("a bug")):
        with pytest.raises(type(error)), committing("committing it"):
            raise error
    # From anywhere in a command, only a store's refusal counts among OSErrors (not a missing file).
    assert classify(FileNotFoundError(errno.ENOENT, "gone"), anywhere=True) is None
    assert classify(PermissionError(errno.EACCES, "denied"), anywhere=True) is not None
