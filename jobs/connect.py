"""Open this warehouse in another tool, without seqlake: print what that tool needs.

\b
  duckdb      SQL for DuckDB: load the Iceberg (and Delta) extensions seqlake's wheels ship, then one
              view per table on its current metadata file (pinned: run it again after new commits)
  pyiceberg   the .pyiceberg.yaml entry of this warehouse's SQL catalog (--write: into ./.pyiceberg.yaml)
  spark       the --jars and --conf options of spark-submit or pyspark for this warehouse's catalog

Plain DuckDB reads the history files without seqlake's checks (page checksums, footer layout); `seqlake
sql` is the verified way. Nothing here writes to the warehouse.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.core.errors import SeqlakeError
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Config

TOOLS = ("duckdb", "pyiceberg", "spark")
PYICEBERG_FILE = ".pyiceberg.yaml"


def duckdb_script(config: Config) -> str:
    """DuckDB statements that define this warehouse's tables as views, in a session without seqlake."""
    import duckdb

    from seqlake.engines.catalog import check_warehouse, open_catalog
    from seqlake.engines.duckdb_session import extension_path, sql_literal
    from seqlake.engines.storage import is_s3
    from seqlake.pipelines.landing.tables import is_delta_table, landing_paths
    from seqlake.tableformat.io import engine_location

    check_warehouse(config)
    catalog = open_catalog(config)
    lines = [f"-- DuckDB {duckdb.__version__} (the extensions' version); warehouse {config.warehouse_uri()}"]
    lines.append("SET autoinstall_known_extensions = false;  -- every extension from the files below")
    for name in ("avro", "iceberg"):  # this order: iceberg reads its Avro manifests through avro
        lines.append(f"LOAD {sql_literal(str(extension_path(name)))};")
    paths = landing_paths(config)
    delta = {name: uri for name, uri in (("landing_events", paths.events), ("quarantine", paths.quarantine))}
    delta = {name: uri for name, uri in delta.items() if is_delta_table(uri)}
    if delta:
        lines.append(f"LOAD {sql_literal(str(extension_path('delta')))};")
    if is_s3(config.warehouse_uri()):
        lines.append(f"LOAD {sql_literal(str(extension_path('httpfs')))};")
        lines.append("-- then: CREATE SECRET (TYPE s3, KEY_ID '...', SECRET '...', ENDPOINT '...', URL_STYLE 'path');")
    for identifier in sorted(catalog.list_tables(config.warehouse.namespace)):
        table = catalog.load_table(identifier)
        location = sql_literal(engine_location(table.metadata_location))
        lines.append(f'CREATE OR REPLACE VIEW "{identifier[-1]}" AS SELECT * FROM iceberg_scan({location});')
    for name, uri in delta.items():
        lines.append(
            f'CREATE OR REPLACE VIEW "{name}" AS SELECT * FROM delta_scan({sql_literal(engine_location(uri))});'
        )
    return "\n".join(lines) + "\n"


def pyiceberg_entry(config: Config) -> dict[str, dict[str, dict[str, str]]]:
    """The `.pyiceberg.yaml` document naming this warehouse's catalog (a REST catalog's secrets stay in
    the environment: pyiceberg reads `PYICEBERG_CATALOG__<NAME>__CREDENTIAL` and `__TOKEN`)."""
    if config.warehouse.catalog_type == "rest":
        entry = {"type": "rest", "uri": config.catalog_uri(), **config.warehouse.catalog_properties}
    else:
        entry = {"type": "sql", "uri": config.catalog_uri(), "warehouse": config.warehouse_uri()}
    return {"catalog": {config.warehouse.catalog_name: entry}}


def write_pyiceberg(document: dict, path: Path) -> None:
    """Add the catalog to `path`, keeping its other catalogs; refused if it names this one differently."""
    import yaml

    existing = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    catalogs = existing.setdefault("catalog", {})
    for name, entry in document["catalog"].items():
        if name in catalogs and catalogs[name] != entry:
            raise SeqlakeError(f"{path} already names a catalog {name!r}, another one; edit it or remove that entry")
        catalogs[name] = entry
    path.write_text(yaml.safe_dump(existing, sort_keys=False))


def spark_options(config: Config) -> list[str]:
    """spark-submit / pyspark options: the jars and every setting of seqlake's catalog and session."""
    from seqlake.engines.spark_session import spark_conf

    conf = spark_conf(config)
    jars = conf.pop("spark.jars")
    conf.pop("spark.master")
    conf = {k: v for k, v in conf.items() if not k.startswith("spark.pyspark.")}  # the caller's own Python
    from seqlake.core.config import CATALOG_SECRET_ENV

    prefix = f"spark.sql.catalog.{config.warehouse.catalog_name}."
    for key, variable in CATALOG_SECRET_ENV.items():  # printed as the variable, never as the value
        if prefix + key in conf:
            conf[prefix + key] = f"${variable}"
    return ["--jars", jars] + [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]


@click.command("connect")
@click.argument("tool", type=click.Choice(TOOLS))
@click.option("--write", is_flag=True, help=f"pyiceberg: add the catalog to ./{PYICEBERG_FILE} instead of printing it.")
@common_options
def command(tool: str, write: bool) -> None:
    """What TOOL (duckdb, pyiceberg, spark) needs to open this warehouse without seqlake: printed, ready
    to paste or to run (`seqlake connect duckdb | duckdb`, with a DuckDB of the same version)."""
    import yaml

    if write and tool != "pyiceberg":
        raise click.UsageError("--write is for pyiceberg")
    config = load_cli_config()
    name = f"{config.warehouse.namespace}.history"
    if tool == "duckdb":
        text = duckdb_script(config)
        document: dict[str, object] = {"tool": tool, "sql": text}
    elif tool == "pyiceberg":
        entry = pyiceberg_entry(config)
        if write:
            write_pyiceberg(entry, Path(PYICEBERG_FILE))
        text = (
            f"# {PYICEBERG_FILE} (in the working directory, ~ or $PYICEBERG_HOME)\n"
            f"{yaml.safe_dump(entry, sort_keys=False)}"
            f"# then: load_catalog({config.warehouse.catalog_name!r}).load_table({name!r})\n"
        )
        if write:
            text = f"added catalog {config.warehouse.catalog_name!r} to {PYICEBERG_FILE}\n"
        document = {"tool": tool, "pyiceberg": entry, "written": PYICEBERG_FILE if write else None}
    else:
        options = spark_options(config)
        # A secret is a "$VARIABLE" the shell expands: double quotes, not shlex's single ones.
        text = " ".join(f'"{part}"' if "=$" in part else shlex.quote(part) for part in options) + "\n"
        text += f"# then: spark.table({f'{config.warehouse.catalog_name}.{name}'!r})\n"
        document = {"tool": tool, "options": options}
    emit(document, lambda: print(text, end=""))


main = job_main(command)

if __name__ == "__main__":
    script_main("connect")
