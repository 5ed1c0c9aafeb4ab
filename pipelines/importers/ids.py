"""Event ids of imported events that carry none: a hash of the event, by a numbered scheme.

An imported event without an id column gets the hash of its *content*: the event's JSON object
without the id, exactly as `payloads.EventMapper` encodes it (keys in mapping order, no spaces,
non-ASCII characters as they are; the set-based mapper in `payloads_sql` writes the same bytes).
An exact duplicate gets the same id, and compaction counts it once. A scheme names the hash:

- scheme 1: BLAKE2b with a 16-byte digest, in hex (imports made before schemes were recorded);
- scheme 2: MD5, in hex, computed by DuckDB in the statement that builds the payload.

Both are 32 hexadecimal characters over the same bytes, so scheme 1 ids can still be computed for
a table whose earlier imports used them. Each import commit records its scheme in the raw table's
snapshot summary (`SCHEME_PROPERTY`); a table keeps the scheme of its first import, so importing a
file again, or a file that overlaps an earlier one, gives its events the ids they had before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from seqlake.core.errors import ConfigError

CURRENT_SCHEME = 2  # what a raw table without earlier imports gets
SCHEMES = {1: "blake2b-128", 2: "md5"}
SCHEME_PROPERTY = "seqlake.import.id-scheme"  # in the snapshot summary of each import commit


def check_scheme(scheme: int) -> int:
    if scheme not in SCHEMES:
        raise ConfigError(f"event id scheme {scheme!r}: not one of {sorted(SCHEMES)}")
    return scheme


def event_id(content: str, scheme: int) -> str:
    """The id of an event whose JSON object without the id is `content`."""
    data = content.encode()
    if scheme == 1:
        return hashlib.blake2b(data, digest_size=16).hexdigest()
    if scheme == 2:
        return hashlib.md5(data, usedforsecurity=False).hexdigest()
    raise ConfigError(f"event id scheme {scheme!r}: not one of {sorted(SCHEMES)}")


def event_id_sql(content: str, scheme: int) -> str | None:
    """DuckDB's expression for the id of the events whose content is the SQL expression `content`;
    None when DuckDB has no such hash (scheme 1: the ids are computed in Python)."""
    return f"md5({content})" if check_scheme(scheme) == 2 else None


def table_scheme(imports: Iterable[Mapping[str, str]]) -> int:
    """The scheme of a raw table, from the snapshot summaries of its import commits, oldest first:
    the scheme its first import recorded (an import commit without one predates schemes: 1), or the
    current one for a table without imports."""
    for summary in imports:
        return check_scheme(int(summary.get(SCHEME_PROPERTY, "1")))
    return CURRENT_SCHEME
