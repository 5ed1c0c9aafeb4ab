"""Typed, validated configuration loaded from YAML.

The configuration file is the one given, else ``$SEQLAKE_CONFIG``, else ``./seqlake.yaml``, else the
packaged default (`conf/seqlake.yaml`, see `seqlake init`). A relative warehouse path resolves against
the folder of the file that names it (the packaged default's against the current directory).

Every model is frozen and forbids unknown keys, so a typo fails at load with the key's path and value
instead of being silently ignored. A profile (``seqlake --profile NAME`` or ``$SEQLAKE_PROFILE``:
``local``, ``s3``, ``cluster``; `conf/profiles/`) overlays where the warehouse, catalog and Spark
master are. Environment variables override those last: ``SEQLAKE_WAREHOUSE`` (a folder or URI;
relative to the current directory), ``SEQLAKE_CATALOG_URI`` (an SQLAlchemy URI) and
``SEQLAKE_SPARK_MASTER``.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from seqlake.core.errors import ConfigError, UnreadableFileError
from seqlake.core.operators import get_operator
from seqlake.core.resources import default_config, profiles_dir
from seqlake.core.sources import KafkaTopic, is_kafka_uri
from seqlake.core.uris import masked_uri

DEFAULT_CONFIG_PATH = default_config()  # packaged: read it with .read_text()
LOCAL_CONFIG_NAME = "seqlake.yaml"  # found in the current directory when no other is named
ENV_CONFIG = "SEQLAKE_CONFIG"
ENV_WAREHOUSE = "SEQLAKE_WAREHOUSE"
ENV_CATALOG_URI = "SEQLAKE_CATALOG_URI"
ENV_PROFILE = "SEQLAKE_PROFILE"
# The REST catalog's secrets, read from the environment only (never from a file, never printed).
CATALOG_SECRET_ENV = {"credential": "SEQLAKE_CATALOG_CREDENTIAL", "token": "SEQLAKE_CATALOG_TOKEN"}
ENV_SPARK_MASTER = "SEQLAKE_SPARK_MASTER"
PROFILES_DIR = profiles_dir()

Engine = Literal["spark", "duckdb"]
EngineSetting = Literal["auto", "spark", "duckdb"]  # layout.ingest_engine, layout.compaction_engine
ColumnType = Literal["bool", "int8", "int16", "int32", "int64", "float32", "float64", "string"]
Identifier = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")]

# Columns every event carries whatever its feature group; user columns may not reuse these names.
RESERVED_COLUMNS = frozenset(
    {"user_id", "feature_group", "event_ts", "lsn", "source_partition", "event_id", "window_id"}
)


class _Frozen(BaseModel):
    # Strict: `bucket_count: true` or `users: "8"` is an error, not 1 or 8 (a float key still takes 2).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ColumnSpec(_Frozen):
    type: ColumnType
    merge: str = "last"
    max_length: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _max_length_only_for_strings(self) -> ColumnSpec:
        if self.max_length is not None and self.type != "string":
            raise ValueError(f"max_length applies to string columns, not {self.type}")
        try:
            operator = get_operator(self.merge)
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if operator.types is not None and self.type not in operator.types:
            raise ValueError(f"merge {self.merge!r} does not apply to a {self.type} column")
        return self


class FeatureGroupSpec(_Frozen):
    item_column: Identifier
    columns: dict[Identifier, ColumnSpec]

    @model_validator(mode="after")
    def _item_column_declared(self) -> FeatureGroupSpec:
        if self.item_column not in self.columns:
            raise ValueError(f"item_column {self.item_column!r} is not one of its columns")
        reserved = RESERVED_COLUMNS.intersection(self.columns)
        if reserved:
            raise ValueError(f"columns {sorted(reserved)} are reserved by seqlake")
        return self


class TenantSpec(_Frozen):
    feature_groups: list[Identifier] = Field(min_length=1)
    columns: list[Identifier] | Literal["all"]
    max_length: int = Field(gt=0)


class WarehouseSpec(_Frozen):
    path: str = "warehouse"
    # sql: pyiceberg's SqlCatalog on `catalog_uri` (SQLAlchemy; a SQLite file in the warehouse when
    # null), Iceberg's JdbcCatalog in Spark. rest: an Iceberg REST catalog at `catalog_uri` (http[s]).
    catalog_type: Literal["sql", "rest"] = "sql"
    catalog_uri: str | None = None
    # More catalog properties, as pyiceberg and Spark's SparkCatalog name them (warehouse, scope,
    # oauth2-server-uri, header.*); secrets come from the environment only (ENV_CATALOG_CREDENTIAL, ...).
    catalog_properties: dict[str, str] = {}
    catalog_name: Identifier = "seqlake"
    namespace: Identifier = "seqlake"

    @model_validator(mode="after")
    def _rest_needs_its_uri(self) -> WarehouseSpec:
        if self.catalog_type == "rest" and not (self.catalog_uri or "").startswith(("http://", "https://")):
            raise ValueError("catalog_type rest needs catalog_uri, the catalog's http:// or https:// address")
        if self.catalog_type == "sql" and (self.catalog_uri or "").startswith(("http://", "https://")):
            raise ValueError("an http(s) catalog_uri is a REST catalog: set catalog_type: rest")
        secret = sorted(set(self.catalog_properties) & set(CATALOG_SECRET_ENV))
        if secret:
            names = ", ".join(f"{key} ({CATALOG_SECRET_ENV[key]})" for key in secret)
            raise ValueError(f"catalog_properties hold no secrets: give {names} in the environment")
        return self


class LayoutSpec(_Frozen):
    bucket_count: int = Field(default=8, ge=1, le=4096)
    window_seconds: int = Field(default=3600, ge=60)
    # The run count trigger of the merge policy: more sorted runs than this force a merge of the newest
    # ones, so a lookup opens at most this many files per table after each compaction step.
    max_runs: int = Field(default=10, ge=1)
    # Closed windows whose original events stay in the detail table (to rebuild older versions).
    detail_retention_windows: int = Field(default=168, ge=1)
    # A backlog of closed windows is compacted in passes of at most this many landing rows each.
    compaction_batch_rows: int = Field(default=2_000_000, ge=1)
    # The engine `seqlake compact` runs unless told otherwise: spark (local mode or a cluster) or
    # duckdb (in-process, no JVM). Both publish the same runs. auto: see `resolve_engine`.
    compaction_engine: EngineSetting = "auto"
    # The engine `seqlake ingest` runs unless told otherwise: spark, or duckdb (in-process: pyarrow and
    # delta-rs, no JVM). Both land the same rows in the same Delta tables and skip each other's batches.
    ingest_engine: EngineSetting = "auto"


def resolve_engine(setting: EngineSetting) -> Engine:
    """The engine a setting names: `auto` is spark when pyspark is importable, else duckdb (the base
    install has no pyspark, and both engines write the same tables)."""
    if setting != "auto":
        return setting
    try:
        found = importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):  # a finder refusing it, or a module without a spec
        found = False
    return "spark" if found else "duckdb"


class MergeSpec(_Frozen):
    """The size-tiered merge policy's knobs (`pipelines/compaction/merge_policy.py`); `layout.max_runs` is its
    run count trigger."""

    size_ratio_percent: int = Field(default=10, ge=0)  # an older run joins a merge up to this much larger
    max_size_amplification_percent: int = Field(default=400, ge=0)  # newer runs over the oldest: merge all
    min_merge_width: int = Field(default=4, ge=2)  # fewest runs a size-ratio merge takes


class MaintenanceSpec(_Frozen):
    """What `seqlake maintain` keeps (`pipelines/maintenance/steps.py`)."""

    snapshot_retention_hours: float = Field(default=168, ge=0)  # snapshots younger than this stay
    keep_snapshots: int = Field(default=5, ge=1)  # the newest snapshots of each table always stay
    orphan_safety_hours: float = Field(default=24, ge=0)  # unreferenced files younger than this stay
    landing_retention_hours: float = Field(default=168, ge=0)  # Delta VACUUM retention of the landing tier
    # Training and fat-row files smaller than this are rewritten together, one file per bucket.
    small_file_bytes: int = Field(default=32 * 2**20, ge=0)


class EventsSpec(_Frozen):
    """What a valid event is, beyond its columns' types: the event times ingest accepts (both ends
    included). An event outside them is quarantined as `event_ts_out_of_range`; `seqlake import`
    counts such events and refuses the file unless told (`--allow-out-of-range`)."""

    min_event_time: datetime = Field(default=datetime(2000, 1, 1, tzinfo=UTC), strict=False)
    max_event_time: datetime = Field(default=datetime(2100, 1, 1, tzinfo=UTC), strict=False)

    @field_validator("min_event_time", "max_event_time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("needs a time zone, e.g. 2000-01-01T00:00:00Z")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> EventsSpec:
        if self.min_event_time >= self.max_event_time:
            raise ValueError(f"min_event_time {self.min_event_time} is not before max_event_time {self.max_event_time}")
        return self

    # Properties, not cached: `model_copy(update=...)` would carry a cached value over to the copy.
    @property
    def min_event_ms(self) -> int:
        """`min_event_time` in epoch milliseconds, as payloads carry event times."""
        return _epoch_ms(self.min_event_time)

    @property
    def max_event_ms(self) -> int:
        return _epoch_ms(self.max_event_time)

    def accepts(self, event_ms: int) -> bool:
        """Whether an event time (epoch milliseconds) is within the bounds."""
        return self.min_event_ms <= event_ms <= self.max_event_ms


@lru_cache(maxsize=64)  # asked once per payload validated
def _epoch_ms(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


class SparkSpec(_Frozen):
    master: str = "local[2]"  # spark-submit's --master wins; $SEQLAKE_SPARK_MASTER overrides this
    # The heap of a driver JVM seqlake starts (in local mode it runs the tasks too), as Spark writes
    # it (4g, 512m); None keeps Spark's 1g. spark-submit's --driver-memory wins.
    driver_memory: str | None = Field(default=None, pattern=r"^[0-9]+[kKmMgGtT]?$")


class GeneratorSpec(_Frozen):
    seed: int = 7
    users: int = Field(default=1000, ge=1)
    heavy_users: int = Field(default=2, ge=0)
    min_events: int = Field(default=5, ge=1)
    max_events: int = Field(default=50_000, ge=1)
    length_alpha: float = Field(default=1.1, gt=0)
    windows: int = Field(default=12, ge=1)
    source_partitions: int = Field(default=4, ge=1, le=1024)
    items: int = Field(default=50_000, ge=1)
    late_share: float = Field(default=0.05, ge=0, le=1)
    very_late_share: float = Field(default=0.02, ge=0, le=1)
    duplicate_share: float = Field(default=0.01, ge=0, le=1)
    malformed_share: float = Field(default=0.002, ge=0, le=1)
    start_ts: datetime = Field(default=datetime.fromisoformat("2026-01-05T00:00:00+00:00"), strict=False)

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorSpec:
        if self.min_events > self.max_events:
            raise ValueError(f"min_events {self.min_events} exceeds max_events {self.max_events}")
        if self.heavy_users > self.users:
            raise ValueError(f"heavy_users {self.heavy_users} exceeds users {self.users}")
        if self.late_share + self.very_late_share > 1:
            raise ValueError("late_share + very_late_share exceeds 1")
        return self

    @field_validator("start_ts")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("start_ts needs a time zone, e.g. 2026-01-05T00:00:00Z")
        return value


class SourceSpec(_Frozen):
    """A named event source `seqlake ingest --source NAME` reads: a Kafka topic
    (kafka://HOST:PORT[,HOST:PORT]/TOPIC, `seqlake.core.sources`)."""

    kafka: str

    @field_validator("kafka")
    @classmethod
    def _kafka_uri(cls, value: str) -> str:
        return KafkaTopic.parse(value).uri  # a ValueError says what is wrong

    def topic(self) -> KafkaTopic:
        return KafkaTopic.parse(self.kafka)


class TrainingSpec(_Frozen):
    """Inference requests and what each capture keeps (versioned late materialization)."""

    requests_per_active_user_per_day: float = Field(default=24.0, gt=0)
    fragment_events: int = Field(default=8, ge=0)  # W: the captured recent fragment
    click_share: float = Field(default=0.1, ge=0, le=1)  # labels of simulated requests
    captures_per_window: int = Field(default=1, ge=1)  # capture points per processing window
    # A capture refuses requests older than the online view's newest arrival by more than this (and
    # any older than an event the view holds of their user): captured now, they would see their future.
    capture_tolerance_seconds: int = Field(default=300, ge=0)


class Config(_Frozen):
    warehouse: WarehouseSpec = WarehouseSpec()
    layout: LayoutSpec = LayoutSpec()
    merge: MergeSpec = MergeSpec()
    maintenance: MaintenanceSpec = MaintenanceSpec()
    events: EventsSpec = EventsSpec()
    spark: SparkSpec = SparkSpec()
    feature_groups: dict[Identifier, FeatureGroupSpec] = Field(min_length=1)
    tenants: dict[Identifier, TenantSpec] = {}
    generator: GeneratorSpec = GeneratorSpec()
    training: TrainingSpec = TrainingSpec()
    sources: dict[Identifier, SourceSpec] = {}

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        owners: dict[str, tuple[str, str]] = {}
        for group, spec in self.feature_groups.items():
            for column, col in spec.columns.items():
                seen = owners.setdefault(column, (group, col.type))
                if seen[1] != col.type:
                    raise ValueError(f"column {column!r} is {col.type} in {group!r} but {seen[1]} in {seen[0]!r}")
        for name, tenant in self.tenants.items():
            for group in tenant.feature_groups:
                if group not in self.feature_groups:
                    raise ValueError(f"tenant {name!r} names unknown feature group {group!r}")
            if tenant.columns != "all":
                known = {c for g in tenant.feature_groups for c in self.feature_groups[g].columns}
                for column in tenant.columns:
                    if column not in known:
                        raise ValueError(
                            f"tenant {name!r} names column {column!r}, "
                            f"not in its feature groups {tenant.feature_groups}"
                        )
        return self

    # -- derived views -------------------------------------------------------------------------

    def column_types(self) -> dict[str, str]:
        """Every attribute column across feature groups with its type, in declaration order."""
        out: dict[str, str] = {}
        for spec in self.feature_groups.values():
            for column, col in spec.columns.items():
                out.setdefault(column, col.type)
        return out

    def event_source(self, source: str) -> KafkaTopic | str:
        """What `seqlake ingest --source SOURCE` reads: the topic of a kafka:// URI or of a source named in
        `sources`, else the raw source table of that name."""
        if source in self.sources:
            return self.sources[source].topic()
        return KafkaTopic.parse(source) if is_kafka_uri(source) else source

    def tenant_columns(self, tenant: str) -> list[str]:
        spec = self.tenants[tenant]
        if spec.columns != "all":
            return list(spec.columns)
        seen: dict[str, None] = {}
        for group in spec.feature_groups:
            seen.update(dict.fromkeys(self.feature_groups[group].columns))
        return list(seen)

    def warehouse_uri(self) -> str:
        """The warehouse as a URI: a local folder becomes file://<absolute path>."""
        location = self.warehouse.path
        if "://" in location:
            return location.rstrip("/")
        # parse_config makes a loaded path absolute; a model built in code resolves against the current directory.
        return Path(location).resolve().as_uri()

    def warehouse_path(self) -> Path:
        """The local warehouse folder; an error for a remote warehouse."""
        uri = self.warehouse_uri()
        if not uri.startswith("file://"):
            raise ConfigError(f"warehouse.path {uri!r} is not a local folder")
        return Path(uri[len("file://") :])

    def catalog_secrets(self) -> dict[str, str]:
        """The catalog's secret properties (credential, token) set in the environment."""
        return {key: os.environ[name] for key, name in CATALOG_SECRET_ENV.items() if os.environ.get(name)}

    def catalog_uri(self) -> str:
        """The catalog's address: a REST catalog's http(s) URI, or the SQLAlchemy URI of the SQL catalog
        (a SQLite file in the warehouse by default)."""
        if self.warehouse.catalog_uri:
            return self.warehouse.catalog_uri
        return f"sqlite:///{self.warehouse_path() / 'catalog.db'}"


def format_validation_error(error: ValidationError, what: str, source: str) -> str:
    """One line: each bad key's dotted path, the value given and what is wrong with it ("; " between keys)."""
    parts = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        value = item.get("input")
        shown = masked_uri(repr(value)) if not isinstance(value, dict) else "{...}"
        parts.append(f"{key} = {shown}: {item['msg']}")
    return f"invalid {what} in {source}: " + "; ".join(parts)


def _anchored(location: object, base_dir: Path) -> object:
    """A relative local folder as an absolute one under `base_dir`; URIs, absolute paths and bad values as given."""
    if not isinstance(location, str) or "://" in location or Path(location).is_absolute():
        return location
    return str((base_dir / location).resolve())


def parse_config(data: dict, source: str = "<dict>", *, base_dir: str | Path | None = None) -> Config:
    """Validate a configuration mapping; raise ConfigError naming each bad key and value.

    A relative ``warehouse.path`` resolves against `base_dir` (default: the current directory), and
    ``$SEQLAKE_WAREHOUSE`` against the current directory.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: expected a mapping at the top level")
    data = _with_profile(dict(data), os.environ.get(ENV_PROFILE))
    if os.environ.get(ENV_SPARK_MASTER):
        data["spark"] = {**(data.get("spark") or {}), "master": os.environ[ENV_SPARK_MASTER]}
    warehouse = data.get("warehouse")
    warehouse = {} if warehouse is None else warehouse  # `warehouse:` left empty: every default
    if isinstance(warehouse, dict):
        warehouse = dict(warehouse)
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        warehouse["path"] = _anchored(warehouse.get("path", WarehouseSpec().path), base)
        if os.environ.get(ENV_WAREHOUSE):
            warehouse["path"] = _anchored(os.environ[ENV_WAREHOUSE], Path.cwd())
        if os.environ.get(ENV_CATALOG_URI):
            warehouse["catalog_uri"] = os.environ[ENV_CATALOG_URI]
        data["warehouse"] = warehouse
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, "configuration", source)) from None


def profile_names() -> list[str]:
    return sorted(path.name.removesuffix(".yaml") for path in PROFILES_DIR.iterdir() if path.name.endswith(".yaml"))


def _with_profile(data: dict, profile: str | None) -> dict:
    """`data` with the profile's sections laid over it (key by key within a section)."""
    if not profile:
        return data
    if profile not in profile_names():
        raise ConfigError(f"unknown profile {profile!r} (${ENV_PROFILE}); profiles: {', '.join(profile_names())}")
    overlay = read_yaml(PROFILES_DIR.joinpath(f"{profile}.yaml"), "profile")
    for section, values in overlay.items():
        data[section] = {**(data.get(section) or {}), **values}
    return data


def read_yaml(path: Path | Traversable, what: str) -> dict:
    """The mapping a YAML file holds (empty for an empty file); `what` names it in the one-line
    ConfigError raised for an unreadable file or invalid YAML."""
    try:
        text = path.read_text()
    except OSError as error:
        raise UnreadableFileError(f"cannot read {what} {path}: {error.strerror}") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} {path} is not valid YAML: {' '.join(str(error).split())}") from None


def find_config(path: str | Path | None = None) -> Path | None:
    """The configuration file to load: `path`, else $SEQLAKE_CONFIG, else ./seqlake.yaml if it exists.

    None means the packaged default.
    """
    named = path or os.environ.get(ENV_CONFIG)
    if named:
        return Path(named)
    local = Path(LOCAL_CONFIG_NAME)
    return local.resolve() if local.is_file() else None


def load_config(path: str | Path | None = None) -> Config:
    """Load the YAML configuration `find_config(path)` names, or the packaged default.

    Raises ConfigError (one line) for an unreadable file, invalid YAML or an invalid key.
    """
    found = find_config(path)
    data = read_yaml(found if found is not None else DEFAULT_CONFIG_PATH, "configuration")
    source = str(found) if found is not None else "the packaged default configuration"
    # A file's relative paths are relative to its folder; the packaged default's to the current one.
    base_dir = found.resolve().parent if found is not None else Path.cwd()
    return parse_config(data, source, base_dir=base_dir)
