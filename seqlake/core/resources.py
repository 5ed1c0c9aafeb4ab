"""The files seqlake ships with its code, read through `importlib.resources`.

The default configuration and the import mapping examples (`conf/`), the analyst SQL (`sql/`) and
the table format's specification (`tableformat/SPEC.md`) are package data: the same calls find them
in a source checkout and in an installed wheel, never relative to the current directory.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

# seqlake/data/conf and seqlake/data/sql point at the repository's top-level conf/ and sql/ folders;
# the wheel holds copies of their files (pyproject.toml, package-data).
_DATA = files("seqlake") / "data"


def default_config() -> Traversable:
    """The packaged default configuration (`conf/seqlake.yaml`)."""
    return _DATA / "conf" / "seqlake.yaml"


def profiles_dir() -> Traversable:
    """The packaged deployment profiles (`conf/profiles/*.yaml`: local, s3, cluster)."""
    return _DATA / "conf" / "profiles"


def mappings_dir() -> Traversable:
    """The packaged import mapping examples (`conf/mappings/*.yaml`)."""
    return _DATA / "conf" / "mappings"


def mapping_files() -> list[Traversable]:
    """The packaged import mappings, by name."""
    return sorted((f for f in mappings_dir().iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)


def sql_dir() -> Traversable:
    """The analyst SQL loaded into every `seqlake sql` session (`sql/*.sql`)."""
    return _DATA / "sql"


def spec() -> Traversable:
    """The table format's specification (`tableformat/SPEC.md`)."""
    return files("seqlake.tableformat") / "SPEC.md"
