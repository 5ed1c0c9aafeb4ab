"""Build a SparkSession wired to seqlake's lakehouse: Iceberg catalog, Delta Lake, local jars only.

Jars come from `.jars/` (filled once by `make jars` from jvm/pom.xml); Spark never resolves packages
at start, so it runs on machines without network access.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from seqlake.core.config import Config
from seqlake.core.errors import ConfigError, SetupError
from seqlake.core.logs import spark_log_level
from seqlake.core.uris import masked_uri

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_JARS_DIR = "SEQLAKE_JARS_DIR"
# `make jars` fills .jars/ of a source checkout; an installed seqlake names its folder with SEQLAKE_JARS_DIR.
CHECKOUT_JARS_DIR = Path(__file__).resolve().parents[2] / ".jars"
REQUIRED_JARS = ("iceberg-spark-runtime", "delta-spark", "delta-storage", "sqlite-jdbc")
# The driver's log4j settings: errors only (package data, so installed wheels and checkouts both have it).
LOG_SETTINGS = Path(__file__).with_name("log4j2.properties")
# The driver's class-data archive in the jars folder (seqlake.engines.spark_classes writes it).
CLASS_ARCHIVE = "spark-classes.jsa"
# A driver JVM that lives for a minute or two (a short job in local mode, such as the demo's
# cross-checks) spends less CPU with the JIT's quick tier alone and one garbage-collector thread than
# it gains from the optimizing tier: about a third less on the demo's samples jobs. The quick tier's
# code cache is small by default (48 MiB), and a full one stops compiling: room for Spark's generated code.
QUICK_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:ReservedCodeCacheSize=240m")


def jars_dir() -> Path:
    return Path(os.environ.get(ENV_JARS_DIR) or CHECKOUT_JARS_DIR)


def class_archive_path() -> Path:
    """The driver's class-data archive (seqlake.engines.spark_classes), beside the jars it was made with."""
    return jars_dir() / CLASS_ARCHIVE


def spark_jars() -> list[Path]:
    """The resolved jars; a SetupError that says how to get them when one is missing."""
    folder = jars_dir()
    jars = sorted(folder.glob("*.jar"))
    missing = [name for name in REQUIRED_JARS if not any(j.name.startswith(name) for j in jars)]
    if missing:
        raise SetupError(
            f"missing Spark jars {missing} in {folder}: run `make jars` once in a source checkout (resolves "
            f"them from Maven Central as declared in jvm/pom.xml), or set {ENV_JARS_DIR} to a folder holding them"
        )
    return jars


def s3_jars() -> list[Path]:
    """Hadoop's S3A and the AWS SDK (jvm/s3/pom.xml), loaded only for an s3:// warehouse."""
    folder = jars_dir() / "s3"
    jars = sorted(folder.glob("*.jar"))
    if not any(jar.name.startswith("hadoop-aws") for jar in jars):
        raise SetupError(
            f"missing the S3 jars (hadoop-aws, AWS SDK bundle) in {folder}: run `make jars` once in a source "
            f"checkout (jvm/s3/pom.xml), or set {ENV_JARS_DIR} to a folder whose s3/ subfolder holds them"
        )
    return jars


def s3_conf() -> dict[str, str]:
    """Hadoop settings that send s3:// and s3a:// paths (Delta's and Iceberg's) to S3A.

    Endpoint and region come from the same AWS settings as pyiceberg, pyarrow and DuckDB
    (`seqlake.engines.storage`); credentials are never put in Spark's configuration: S3A's default provider
    chain reads the AWS_* variables (or the instance's role) itself, on the driver and the executors.
    """
    from seqlake.engines.storage import S3Settings

    settings = S3Settings.from_env()
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": settings.region,
    }
    if settings.endpoint:  # an S3-compatible server: path-style URLs, plain HTTP when it says so
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(settings.endpoint.startswith("https")).lower()
    return conf


def jdbc_catalog_options(catalog_uri: str) -> dict[str, str]:
    """Translate the SQLAlchemy URI pyiceberg uses into the JDBC options Iceberg's JdbcCatalog uses."""
    if catalog_uri.startswith("sqlite:///"):
        return {"uri": "jdbc:sqlite:" + catalog_uri[len("sqlite:///") :]}
    parts = urlsplit(catalog_uri)
    if parts.scheme.split("+")[0] in ("postgresql", "postgres"):
        options = {"uri": f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"}
        if parts.username:
            options["jdbc.user"] = parts.username
        if parts.password:
            options["jdbc.password"] = parts.password
        return options
    raise ConfigError(
        f"warehouse.catalog_uri = {masked_uri(catalog_uri)!r}: Spark supports sqlite:/// and postgresql:// catalogs"
    )


def catalog_options(config: Config) -> dict[str, str]:
    """The options of Spark's SparkCatalog for the configured catalog (secrets from the environment)."""
    if config.warehouse.catalog_type == "rest":
        return {
            "type": "rest",
            "uri": config.catalog_uri(),
            **config.warehouse.catalog_properties,
            **config.catalog_secrets(),
        }
    return {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "warehouse": config.warehouse_uri(),
        # pyiceberg creates the catalog tables (open_catalog). Iceberg's own creation check leaves
        # a SQLite read open on a pooled connection, which then never sees pyiceberg's commits.
        "jdbc.init-catalog-tables": "false",
        **jdbc_catalog_options(config.catalog_uri()),
    }


def spark_conf(config: Config, master: str = "local[2]", jars: bool = True) -> dict[str, str]:
    """Every setting of a seqlake Spark session, as plain key/values (also usable by spark-submit).

    `jars=False` leaves spark.jars out (a submitter passed them: seqlake's jar folder need not exist
    where the code runs, e.g. from a --py-files zip)."""
    from seqlake.engines.storage import is_s3

    catalog = f"spark.sql.catalog.{config.warehouse.catalog_name}"
    on_s3 = is_s3(config.warehouse_uri())
    conf = {
        "spark.master": master,
        "spark.sql.extensions": ",".join(
            [
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
                "io.delta.sql.DeltaSparkSessionExtension",
            ]
        ),
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        catalog: "org.apache.iceberg.spark.SparkCatalog",
        # pyiceberg commits outside Spark; a cached table would serve a stale snapshot.
        f"{catalog}.cache-enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        # parquet-java checks the page CRCs seqlake's files carry (seqlake.tableformat.page_checksums): a
        # damaged page fails the read instead of turning into wrong rows. Iceberg's reader honours it.
        "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
        # History files may hold BYTE_STREAM_SPLIT float pages (older files; LayoutPolicy.byte_stream_split),
        # which Iceberg's vectorized Parquet reader refuses; its row reader decodes them.
        "spark.sql.iceberg.vectorization.enabled": "false",
        # Overflowing merges fail loudly on both engines (DuckDB's CAST does too), never wrap.
        "spark.sql.ansi.enabled": "true",
        # Python workers run seqlake's own code (mapInArrow writers): the same interpreter as here.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.shuffle.partitions": str(max(2, config.layout.bucket_count)),
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Spark's start-up lines and warnings stay out of a job's output (log4j2.properties says why).
        "spark.driver.extraJavaOptions": driver_java_options(),
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.adaptive.enabled": "true",
        # Storage-partitioned joins over bucket(N, user_id) need these on.
        "spark.sql.sources.v2.bucketing.enabled": "true",
        "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    }
    if config.spark.driver_memory:
        conf["spark.driver.memory"] = config.spark.driver_memory
    for key, value in catalog_options(config).items():
        conf[f"{catalog}.{key}"] = value
    if jars:
        conf["spark.jars"] = ",".join(str(jar) for jar in spark_jars() + (s3_jars() if on_s3 else []))
    if on_s3:
        conf.update(s3_conf())
    return conf


def driver_java_options(quick: bool = False, archive: bool = True) -> str:
    """The driver JVM's options: seqlake's log settings; the class archive when set-up wrote one
    (`archive`); `quick`, for a short job in local mode, with QUICK_JVM_OPTIONS."""
    options = [f"-Dlog4j2.configurationFile={LOG_SETTINGS.as_uri()}", *(QUICK_JVM_OPTIONS if quick else ())]
    path = class_archive_path()
    if archive and path.is_file():
        # The JVM starts without an archive it cannot use (another JDK or Spark); its warning about
        # that would go to stdout, which carries a command's answer.
        options += [shlex.quote(f"-XX:SharedArchiveFile={path}"), "-Xlog:cds*=off"]
    return " ".join(options)


def submitted_conf() -> dict[str, str]:
    """The settings `spark-submit` (or an already running SparkContext) passed; empty when run by plain python.

    `spark-submit` starts the JVM first and hands its gateway to Python through PYSPARK_GATEWAY_PORT;
    its --master/--conf/--jars are then system properties a SparkConf reads. Without that gateway, no JVM
    is started here: the builder starts it with seqlake's settings on its command line.
    """
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return dict(active.getConf().getAll())
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def session_settings(defaults: dict[str, str], submitted: dict[str, str]) -> dict[str, str]:
    """seqlake's settings the submitter left unset: what spark-submit passed always wins.

    The catalog and SQL extensions load in the driver's JVM, which spark-submit started already: jars
    named afterwards never reach its class path, so a submission must pass them with --jars.
    """
    if submitted:
        passed = [Path(urlsplit(jar).path).name for jar in submitted.get("spark.jars", "").split(",") if jar]
        missing = [name for name in REQUIRED_JARS if not any(jar.startswith(name) for jar in passed)]
        if missing:
            raise SetupError(
                f"spark-submit was not given the jars {missing}: pass "
                "--jars $(python -m seqlake.engines.spark_session --jars) (the jars of seqlake's jar folder)"
            )
    return {key: value for key, value in defaults.items() if key not in submitted}


def spark_session(config: Config, app_name: str = "seqlake", master: str | None = None, **extra: str) -> SparkSession:
    """Start (or reuse) the SparkSession for this configuration.

    Under `spark-submit`, its master, jars, parallelism and every other --conf it passed stay as given;
    seqlake fills in only what is missing (catalog, extensions, ...).
    """
    from pyspark.sql import SparkSession

    from seqlake.engines.catalog import open_catalog

    open_catalog(config)  # creates the catalog tables and namespace Spark expects
    # PySpark picks the workers' interpreter from the environment, not from spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = submitted_conf()
    builder = SparkSession.builder if "spark.app.name" in submitted else SparkSession.builder.appName(app_name)
    settings = spark_conf(config, master or config.spark.master, jars="spark.jars" not in submitted)
    settings.update(extra)
    settings = session_settings(settings, submitted)
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.debug("starting Spark (%s) for %s", settings.get("spark.master", submitted.get("spark.master")), app_name)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark_log_level())  # what the user chose (--log-level), ERROR by default
    return session


# seqlake's importable packages: what Spark executors need to run its code (mapInArrow writers).
CODE_PACKAGES = ("seqlake",)  # its tableformat, pipelines and jobs are links the zip follows


def pack_code(target: Path) -> Path:
    """Zip seqlake's packages (package data included) for `spark-submit --py-files`.

    A zip of the code rather than a packed environment: executors already need Python with pyarrow,
    pyiceberg and DuckDB (a cluster's image provides them); seqlake's own code changes with every
    release and is small, so it travels with each submission.
    """
    import zipfile

    root = Path(__file__).resolve().parents[2]  # the folder holding the seqlake package
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in CODE_PACKAGES:
            # Follow links: a checkout's package data (seqlake/data/conf, .../sql) links to conf/ and sql/.
            for folder, subfolders, files in os.walk(root / package, followlinks=True):
                subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
                for name in sorted(files):
                    path = Path(folder) / name
                    archive.write(path, path.relative_to(root).as_posix())
    return target


def main(argv: list[str] | None = None) -> None:
    """`python -m seqlake.engines.spark_session --jars [--s3]` prints the value of spark-submit's --jars;
    `--py-files ZIP` writes seqlake's code for spark-submit's --py-files."""
    import click

    @click.command(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--jars", is_flag=True, help="Print the value of spark-submit --jars.")
    @click.option("--s3", is_flag=True, help="With --jars: add the S3 jars (for s3:// warehouses).")
    @click.option("--py-files", metavar="ZIP", type=click.Path(path_type=Path), help="Write seqlake's code as a zip.")
    def helper(jars: bool, s3: bool, py_files: Path | None) -> None:
        if jars == (py_files is not None):
            raise click.UsageError("give one of --jars and --py-files")
        if py_files is not None:
            click.echo(pack_code(py_files))
            return
        click.echo(",".join(str(jar) for jar in spark_jars() + (s3_jars() if s3 else [])))

    helper.main(args=argv, prog_name="python -m seqlake.engines.spark_session")


if __name__ == "__main__":
    main()
