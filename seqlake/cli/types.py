"""Option types shared by the commands: a bad value fails while parsing, with one clear line (exit 2).

Each type's message says what the value must be and repeats what was given; the command line puts
the option's name in front (`--user: must be an integer >= 0, got -5`).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import click

INT64_MAX = 2**63 - 1
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_RUN_ID = re.compile(r"[a-z][a-z0-9]{0,63}")


# Every command's --engine (seqlake.core.config.Engine): Spark, or the in-process engine (DuckDB, pyarrow,
# delta-rs). Not imported from the configuration: `--help` loads no pydantic.
ENGINES = ("spark", "duckdb")


class EngineChoice(click.Choice):
    """spark or duckdb; each of `aliases` (a former name) is taken as the engine it maps to."""

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        super().__init__(ENGINES)
        self.aliases = dict(aliases or {})

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = self.aliases.get(value, value)
        return super().convert(value, param, ctx)


# forget's and maintain's --engine: what changes the landing tier's Delta tables.
LANDING_ENGINE_HELP = (
    "Engine that changes the landing tier: spark (Delta's own writer) or duckdb (in-process, delta-rs) "
    "(default: layout.ingest_engine of the configuration; auto: spark when pyspark is installed, else duckdb)."
)


class IntegerAtLeast(click.ParamType):
    """An integer in [minimum, maximum] (by default up to the largest 64-bit integer)."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int = INT64_MAX) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value))
            except ValueError:
                self.fail(f"must be an integer, got {value!r}", param, ctx)
        if number < self.minimum:
            self.fail(f"must be an integer >= {self.minimum}, got {value}", param, ctx)
        if number > self.maximum:
            self.fail(f"must be an integer <= {self.maximum}, got {value}", param, ctx)
        return number


class NumberAbove(click.ParamType):
    """A finite number >= minimum (> minimum when `strict`)."""

    name = "number"

    def __init__(self, minimum: float, *, strict: bool) -> None:
        self.minimum, self.strict = minimum, strict

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"must be a finite number, got {value}", param, ctx)
        if number < self.minimum or (self.strict and number == self.minimum):
            self.fail(f"must be a number {'>' if self.strict else '>='} {self.minimum:g}, got {value}", param, ctx)
        return number


class _Pattern(click.ParamType):
    def __init__(self, name: str, pattern: re.Pattern[str], what: str) -> None:
        self.name, self.pattern, self.what = name, pattern, what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not self.pattern.fullmatch(str(value)):
            self.fail(f"{value!r} is not {self.what}", param, ctx)
        return str(value)


# A table or namespace of the configured catalog: letters, digits and underscores, never a path.
TABLE_NAME = _Pattern("table", _IDENTIFIER, "a table name (letters, digits and _; e.g. history)")
NAMESPACE_NAME = _Pattern("namespace", _IDENTIFIER, "a namespace name (letters, digits and _; e.g. bench)")


class EventSource(click.ParamType):
    """What `seqlake ingest` reads: a raw source table, a source named in the configuration's `sources`,
    or a Kafka topic's kafka://HOST:PORT[,HOST:PORT]/TOPIC."""

    name = "source"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from seqlake.core.sources import KafkaTopic, is_kafka_uri

        text = str(value)
        if is_kafka_uri(text):
            try:
                return KafkaTopic.parse(text).uri
            except ValueError as error:
                self.fail(str(error), param, ctx)
        if not _IDENTIFIER.fullmatch(text):
            self.fail(
                f"{value!r} is not a table name (letters, digits and _), a configured source nor a kafka:// URI",
                param,
                ctx,
            )
        return text


# Run ids as seqlake writes them (w<window>, b<first>t<last>n<count>, m...).
RUN_ID = _Pattern("run", _RUN_ID, "a run id (e.g. w491000; `seqlake runs` lists them)")


class CommaList(click.ParamType):
    """Comma-separated names, as a tuple (blanks dropped)."""

    name = "a,b,c"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        names = tuple(part.strip() for part in str(value).split(",") if part.strip())
        if not names:
            self.fail(f"{value!r} names nothing", param, ctx)
        return names


class IsoTime(click.ParamType):
    """An ISO 8601 time with a time zone (`Z` allowed)."""

    name = "time"
    otherwise = "is not an ISO 8601 time"  # what the error says of a value that is none

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(value, self.otherwise)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def parse_time(value: Any, otherwise: str) -> datetime:
    """An ISO 8601 time with a zone; a ValueError saying `'value' otherwise, e.g. ...` when it is none."""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} {otherwise}, e.g. 2026-01-05T10:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} needs a time zone, e.g. 2026-01-05T10:00:00Z")
    return moment


class SnapshotOrTime(IsoTime):
    """A snapshot id (an integer) or an ISO 8601 time with a time zone: an int or a datetime."""

    name = "snapshot|time"
    otherwise = "is neither a snapshot id nor an ISO 8601 time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if str(value).strip().isdigit():
            return IntegerAtLeast(0).convert(str(value).strip(), param, ctx)
        return super().convert(value, param, ctx)


class FrontierText(click.ParamType):
    """A frontier as `PARTITION:LSN,...` (e.g. `0:120,1:98`): a `seqlake.tableformat.frontier.Frontier`."""

    name = "partition:lsn,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from seqlake.tableformat.frontier import Frontier  # loaded only when the option is given

        if isinstance(value, Frontier):
            return value
        try:
            return Frontier.parse(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


COMMA_LIST = CommaList()
ISO_TIME = IsoTime()
HOURS = NumberAbove(0, strict=False)
SNAPSHOT_OR_TIME = SnapshotOrTime()
FRONTIER = FrontierText()


# -- SQL parameters ------------------------------------------------------------------------------

SQL_TYPES = ("int", "float", "bool", "timestamp", "date", "text")
_SQL_NAME = re.compile(r"[A-Za-z_]\w*")
_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
_BOOLS = {"true": True, "false": False}


def sql_value(text: str, kind: str | None = None) -> object:
    """A parameter's value: of type `kind`, or typed by its look (integer, number, true/false, ISO 8601
    time) and else text. Raises ValueError saying what `text` is not."""
    from datetime import date

    if kind is None:
        if _INTEGER.fullmatch(text):
            return int(text)
        if _NUMBER.fullmatch(text):
            return float(text)
        if text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        if _TIME.fullmatch(text):
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
        return text
    if kind == "text":
        return text
    if kind == "int":
        if not _INTEGER.fullmatch(text.strip()):
            raise ValueError(f"{text!r} is not an integer")
        return int(text)
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if kind == "bool":
        if text.lower() not in _BOOLS:
            raise ValueError(f"{text!r} is not true or false")
        return _BOOLS[text.lower()]
    try:
        return date.fromisoformat(text) if kind == "date" else datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 {'date' if kind == 'date' else 'time'}") from None


class SqlParam(click.ParamType):
    """`NAME=VALUE` or `NAME:TYPE=VALUE`, as (name, typed value)."""

    name = "NAME[:TYPE]=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, object]:
        if isinstance(value, tuple):
            return value
        spec, sep, text = str(value).partition("=")
        name, _, kind = spec.partition(":")
        if not sep or not _SQL_NAME.fullmatch(name):
            self.fail(f"{value!r} is not NAME=VALUE (or NAME:TYPE=VALUE)", param, ctx)
        if kind and kind not in SQL_TYPES:
            self.fail(f"{value!r}: unknown type {kind!r} (types: {', '.join(SQL_TYPES)})", param, ctx)
        try:
            return name, sql_value(text, kind or None)
        except ValueError as error:
            self.fail(f"{name}: {error}", param, ctx)


SQL_PARAM = SqlParam()
