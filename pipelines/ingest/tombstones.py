"""Forget's tombstones: what every later ingest honours, so a forgotten user's raw records never land
again, pending or replayed.

`seqlake forget` records, before it removes anything, one row per forgotten user and source partition
in the Iceberg table `forget_tombstones`: the user's keyed hash and bucket (`seqlake.core.forget_key`;
no id in clear) and the frontier, the highest LSN of that partition that the warehouse or a raw source
table held when the forget began. A raw record that names the user (a valid one by its `user_id`, a
malformed one by every id its payload names, forget's rule) with an LSN at or below its partition's
frontier is dropped by the validation query itself (`anti_join_sql`: one anti-join on the hash, in
DuckDB's and in Spark's SQL), so it lands neither in the landing tier nor in its quarantine. Records
above the frontier arrived after the forget: new data. The table is never rewritten or expired by
forget; maintenance removes the raw records the tombstones cover (`raw_forgotten`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.forget_key import Dialect, bucket_sql, forget_key, hash_sql, user_bucket, user_hash
from seqlake.core.payload import DIGIT_RUN, USER_ID_VALUE
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists

TOMBSTONES = "forget_tombstones"
SCHEMA = pa.schema(
    [
        pa.field("forget_id", pa.string(), nullable=False),
        pa.field("user_hash", pa.string(), nullable=False),
        pa.field("user_bucket", pa.int32(), nullable=False),
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),  # the frontier: records at or below it never land
    ]
)


def _numbered(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_metadata({b"PARQUET:field_id": str(i).encode()}) for i, f in enumerate(schema, start=1)])


def tombstone_table(config: Config, *, create: bool = False) -> Table | None:
    catalog = open_catalog(config)
    identifier = table_identifier(config, TOMBSTONES)
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None or not create:
        return existing
    try:
        return catalog.create_table(identifier, schema=pyarrow_to_schema(_numbered(SCHEMA)))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def raw_tables(config: Config, catalog: Catalog | None = None) -> list[Table]:
    """The namespace's raw source tables (the raw record's columns, no `user_id`)."""
    catalog = catalog or open_catalog(config)
    found = []
    for identifier in sorted(catalog.list_tables(config.warehouse.namespace)):
        table = catalog.load_table(identifier)
        names = set(table.schema().column_names)
        if set(RAW_SCHEMA.names) <= names and "user_id" not in names:
            found.append(table)
    return found


def source_frontier(config: Config) -> dict[int, int]:
    """The highest LSN per source partition the raw source tables hold now (their records not yet
    ingested included: those are what an ingest racing a forget would land)."""
    top: dict[int, int] = {}
    for table in raw_tables(config):
        if table.current_snapshot() is None:
            continue
        rows = table.scan(selected_fields=("source_partition", "lsn")).to_arrow()
        if not rows.num_rows:
            continue
        for item in rows.group_by("source_partition").aggregate([("lsn", "max")]).to_pylist():
            partition = int(item["source_partition"])
            top[partition] = max(top.get(partition, -1), int(item["lsn_max"]))
    return top


def record(config: Config, forget_id: str, users: list[int], frontier: dict[int, int]) -> None:
    """The request's tombstones, once (a resumed request recorded them already): one commit."""
    table = tombstone_table(config, create=True)
    assert table is not None
    if table.current_snapshot() is not None:
        ids = table.scan(selected_fields=("forget_id",)).to_arrow()["forget_id"]
        if pc.any(pc.equal(ids, forget_id)).as_py():
            return
    key = forget_key()
    assert key is not None
    rows = [
        {
            "forget_id": forget_id,
            "user_hash": user_hash(key, user),
            "user_bucket": user_bucket(key, user),
            "source_partition": partition,
            "lsn": lsn,
        }
        for user in users
        for partition, lsn in sorted(frontier.items())
    ]
    if rows:
        table.append(pa.Table.from_pylist(rows, schema=SCHEMA))


@dataclass(frozen=True)
class Tombstones:
    """The tombstones an ingest batch honours: one row per (user hash, partition), the highest
    frontier of all requests; and the key that hashes a record's ids alike."""

    rows: pa.Table  # user_hash, user_bucket, source_partition, lsn
    key: bytes | None

    def __bool__(self) -> bool:
        return self.rows.num_rows > 0

    def anti_join_sql(self, validated: str, columns: list[str], dialect: Dialect) -> str:
        """The rows of the query `validated` (its `columns`) that no tombstone covers: a valid record
        by its user, a malformed one by the ids its payload names (`seqlake.core.payload.named_user_ids`),
        hashed only where the keyed bucket holds a forgotten user."""
        if not self:
            return validated
        first = self._named_hash(dialect)
        valid = (
            f"CASE WHEN {self._bucket('user_id')} IN ({self._buckets()}) THEN {self._hashed('user_id', dialect)} END"
        )
        # A malformed payload naming several forgotten users is judged by the first it names.
        tomb_hash = f"CASE WHEN reason IS NULL THEN {valid} ELSE {first} END"
        return self._anti_join(validated, columns, tomb_hash)

    def raw_kept_sql(self, source: str) -> str:
        """DuckDB: the raw records of `source` (RAW_SCHEMA) no tombstone covers, each judged by the ids
        its payload names (valid or not), as maintenance rewrites a raw source."""
        if not self:
            return f"SELECT * FROM {source}"
        return self._anti_join(source, list(RAW_SCHEMA.names), self._named_hash("duckdb"))

    def _buckets(self) -> str:
        return ", ".join(str(b) for b in sorted(set(self.rows["user_bucket"].to_pylist())))

    def _bucket(self, integer: str) -> str:
        assert self.key is not None
        return bucket_sql(self.key, integer)

    def _hashed(self, integer: str, dialect: Dialect) -> str:
        assert self.key is not None
        return hash_sql(self.key, f"CAST({integer} AS {'VARCHAR' if dialect == 'duckdb' else 'STRING'})", dialect)

    def _named_hash(self, dialect: Dialect) -> str:
        """The hash of the first forgotten user the record's payload names (forget's rule), or NULL."""
        buckets = self._buckets()
        hashes = ", ".join(f"'{h}'" for h in sorted(set(self.rows["user_hash"].to_pylist())))
        if dialect == "duckdb":
            named = (
                "list_filter(list_transform(flatten(list_transform(regexp_extract_all(payload, "
                f"{_duck_literal(USER_ID_VALUE)}, 1), v -> regexp_extract_all(v, '{DIGIT_RUN}'))), "
                "d -> TRY_CAST(d AS BIGINT)), u -> u IS NOT NULL)"
            )
            candidates = f"list_filter({named}, u -> {self._bucket('u')} IN ({buckets}))"
            return (
                f"list_filter(list_transform({candidates}, u -> {self._hashed('u', dialect)}), h -> h IN ({hashes}))[1]"
            )
        named = (
            "filter(transform(flatten(transform(regexp_extract_all(payload, "
            f"{_spark_literal(USER_ID_VALUE)}, 1), v -> regexp_extract_all(v, '{DIGIT_RUN}', 0))), "
            "d -> try_cast(d AS BIGINT)), u -> u IS NOT NULL)"
        )
        candidates = f"filter({named}, u -> {self._bucket('u')} IN ({buckets}))"
        return f"get(filter(transform({candidates}, u -> {self._hashed('u', dialect)}), h -> h IN ({hashes})), 0)"

    def _anti_join(self, relation: str, columns: list[str], tomb_hash: str) -> str:
        values = ", ".join(
            f"('{r['user_hash']}', {int(r['source_partition'])}, {int(r['lsn'])})" for r in self.rows.to_pylist()
        )
        selected = ", ".join(f"_v.{c}" for c in columns)
        source = relation if relation.isidentifier() else f"({relation})"
        return f"""
    SELECT {selected}
    FROM (SELECT *, {tomb_hash} AS _tomb_hash FROM {source} AS _validated) AS _v
    WHERE NOT EXISTS (
      SELECT 1 FROM (VALUES {values}) AS _t(user_hash, source_partition, lsn)
      WHERE _t.user_hash = _v._tomb_hash AND _t.source_partition = _v.source_partition AND _v.lsn <= _t.lsn
    )"""


def _duck_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _spark_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


NONE = Tombstones(SCHEMA.empty_table().select(["user_hash", "user_bucket", "source_partition", "lsn"]), None)


def current(config: Config) -> Tombstones:
    """The tombstones recorded now (none in a warehouse that does not exist yet: nothing is created).
    A forget recorded tombstones and the key is not set: a one-line SetupError (they cannot be honoured)."""
    if config.warehouse_uri().startswith("file://") and not config.warehouse_path().exists():
        return NONE
    table = tombstone_table(config)
    if table is None or table.current_snapshot() is None:
        return NONE
    rows = table.scan(selected_fields=("user_hash", "user_bucket", "source_partition", "lsn")).to_arrow()
    if not rows.num_rows:
        return NONE
    top = rows.group_by(["user_hash", "user_bucket", "source_partition"]).aggregate([("lsn", "max")])
    top = top.rename_columns(["user_hash", "user_bucket", "source_partition", "lsn"])
    return Tombstones(top, forget_key())
