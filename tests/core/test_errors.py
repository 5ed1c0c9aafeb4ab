"""One error module: every error seqlake raises on purpose is defined in seqlake/core/errors.py, and the
commit conflict is a class of its own that no other error derives from."""

from __future__ import annotations

import importlib
import pkgutil

import seqlake.core.errors as errors
from seqlake.core.errors import RunsChanged, SeqlakeError

PACKAGES = ("seqlake", "benchmarks")


def _every_module() -> list[str]:
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names += [
            m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.") if not m.name.endswith("__main__")
        ]
    return names


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    direct: list[type] = cls.__subclasses__()
    for sub in direct:
        found |= {sub, *_subclasses(sub)}
    return found


def test_every_error_class_is_defined_in_seqlake_errors():
    for name in _every_module():
        importlib.import_module(name)
    defined_elsewhere = sorted(
        f"{c.__module__}.{c.__name__}" for c in _subclasses(SeqlakeError) if c.__module__ != errors.__name__
    )
    assert defined_elsewhere == []
    assert {c.__name__ for c in _subclasses(SeqlakeError)} >= {
        "ConfigError",
        "SetupError",
        "SchemaError",
        "CorruptFileError",
        "FsckError",
        "UnsortedInputError",
        "RunsChanged",
        "WindowsAlreadyPublished",
        "UnknownRunError",
        "SimulatedCrash",
        "UsersRemain",
        "ImportDataError",
        "ReadOnlyError",
        "SqlError",
    }


def test_the_commit_conflict_is_caught_by_its_own_class_only():
    assert RunsChanged.__bases__ == (SeqlakeError,) and _subclasses(RunsChanged) == set()
    others = _subclasses(SeqlakeError) - {RunsChanged}
    assert not any(issubclass(RunsChanged, other) for other in others)
    assert not any(issubclass(other, RunsChanged) for other in others)


def test_old_import_paths_still_name_the_same_classes():
    from seqlake.sql_session import SqlError
    from seqlake.tableformat.fsck import FsckError
    from seqlake.tableformat.registry import RunsChanged as registry_conflict
    from seqlake.tableformat.verified import CorruptFileError

    assert (SqlError, FsckError, registry_conflict, CorruptFileError) == (
        errors.SqlError,
        errors.FsckError,
        errors.RunsChanged,
        errors.CorruptFileError,
    )
