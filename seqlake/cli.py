"""The `seqlake` command line: one subcommand per job, each with its own --help."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from seqlake.cli_args import ArgumentParser
from seqlake.errors import SeqlakeError, SetupError

DEBUG_ENV = "SEQLAKE_DEBUG"
ENV_CONFIG = "SEQLAKE_CONFIG"  # seqlake.config.ENV_CONFIG; not imported: `seqlake --help` loads no pydantic
ENV_PROFILE = "SEQLAKE_PROFILE"  # seqlake.config.ENV_PROFILE


# Top-level modules of the optional extras (pyproject.toml) and the extra that installs each.
EXTRAS = {"pyspark": "spark", "delta": "spark", "rocksdict": "sst", "matplotlib": "notebook", "nbclient": "notebook"}


def _job(module: str) -> Callable[[list[str]], int]:
    # Jobs import their engines lazily: `seqlake --help` stays fast.
    def run(argv: list[str]) -> int:
        try:
            return importlib.import_module(module).main(argv)
        except ModuleNotFoundError as error:  # an optional dependency: say which extra installs it
            raise _missing_extra(error) from None

    return run


def _missing_extra(error: ModuleNotFoundError) -> Exception:
    """A SetupError naming the extra to install when an optional dependency is missing."""
    top = (error.name or "").split(".")[0]
    if top not in EXTRAS:
        return error
    return SetupError(f"this command needs {top}: pip install 'seqlake[{EXTRAS[top]}]'")


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "init": (_job("jobs.init"), "write a starter configuration (seqlake.yaml) and import mapping examples to edit"),
    "demo": (
        _job("jobs.demo"),
        "run the main job end to end on the configured warehouse and print its report",
    ),
    "generate": (_job("jobs.generate"), "write a deterministic synthetic event stream (raw source records)"),
    "import": (_job("jobs.import_events"), "import your own event files (Parquet, CSV, JSON Lines) via a mapping"),
    "ingest": (_job("jobs.ingest"), "ingest the raw source into the landing tier (Delta), quarantining bad records"),
    "compact": (_job("jobs.compact"), "publish closed windows as sorted runs of the history table; merge runs"),
    "history": (_job("jobs.history"), "print one user's history (feature groups, columns, time range, Top-K, LSN)"),
    "sql": (_job("jobs.sql"), "DuckDB SQL over the warehouse with seqlake's views and macros loaded (sql/)"),
    "maintain": (_job("jobs.maintain"), "expire snapshots, remove orphan files, vacuum landing, drop old detail"),
    "forget": (_job("jobs.forget"), "remove every row of some users from every table, one commit per table"),
    "migrate": (_job("jobs.migrate"), "apply the configuration's columns (added, widened, retired) to the tables"),
    "fsck": (_job("jobs.fsck"), "check every invariant of the history table's files and runs"),
    "drop-run": (_job("jobs.drop_run"), "remove a damaged run from a history table so its windows can be rebuilt"),
    "bench-layout": (_job("jobs.bench_layout"), "measure candidate file layouts side by side (ratios to the default)"),
    "bench-ingest": (_job("jobs.bench_ingest"), "measure ingest cost for users with 0 and 10^5 prior events (ratio)"),
    "bench-reads": (_job("jobs.bench_reads"), "measure multi-user reads and the read cache side by side (ratios)"),
    "bench-compact": (_job("jobs.bench_compact"), "measure catch-up compaction cost against the number of windows"),
    "bench-merge": (_job("jobs.bench_merge"), "measure write amplification of run merges over many windows (ratios)"),
    "bench-peers": (_job("jobs.bench_peers"), "measure point lookups against RocksDB, DuckDB and Arrow IPC (ratios)"),
    "bench-samples": (_job("jobs.bench_samples"), "measure training samples from pointers against fat-row reads"),
    "samples": (
        _job("jobs.samples"),
        "rebuild training samples from pointers, verified (versioned late materialization)",
    ),
    "backfill": (
        _job("jobs.backfill"),
        "sequences for any labelled table as of each row's time (event time or arrival), with a leakage report",
    ),
    "export-sst": (_job("jobs.export_sst"), "export a sorted run as RocksDB SST files for bulk loading"),
    "storage": (_job("seqlake.storage"), "S3 bucket chores: create, list, empty (settings from the AWS_* variables)"),
}


def build_parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in COMMANDS)
    lines = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    parser = ArgumentParser(
        prog="seqlake",
        description="seqlake: sorted, compacted, versioned storage for long user-interaction histories.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands:\n{lines}\n\nRun `seqlake COMMAND --help` for a command's options.",
        usage="seqlake [-h] [--version] [--config FILE] [--profile NAME] COMMAND [ARGS...]",
    )
    # For the help text: main() reads these itself, before the command.
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"configuration YAML for the command (else ${ENV_CONFIG}, ./seqlake.yaml, or the packaged default)",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help=f"where it runs: local, s3 or cluster (conf/profiles/; else ${ENV_PROFILE}); laid over the configuration",
    )
    return parser


def _global_options(argv: list[str], parser: argparse.ArgumentParser) -> tuple[dict[str, str], list[str]]:
    """`--config FILE` and `--profile NAME` (or `--option=value`) before the command; the rest of argv
    from the command on."""
    found: dict[str, str] = {}
    while argv and argv[0].partition("=")[0] in ("--config", "--profile"):
        option, sep, value = argv[0].partition("=")
        if not sep:
            if len(argv) < 2 or argv[1].startswith("-"):
                parser.error(f"{option} needs a {'file' if option == '--config' else 'name'}")
            value, argv = argv[1], argv[2:]
        else:
            argv = argv[1:]
        found[option] = value
    return found, argv


def _unknown(command: str) -> str:
    close = difflib.get_close_matches(command, COMMANDS, n=1)
    if close:
        return f"unknown command {command!r} (did you mean {close[0]!r}?)"
    return f"unknown command {command!r} (choose from {', '.join(COMMANDS)})"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    options, argv = _global_options(argv, parser)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    if argv[0] == "--version":
        from seqlake import __version__

        print(f"seqlake {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        parser.error(_unknown(command))
    with _config_for_command(options.get("--config"), options.get("--profile")):
        return _run(command, rest)


@contextmanager
def _config_for_command(config: str | None, profile: str | None) -> Iterator[None]:
    # Every job loads its configuration with load_config, which reads $SEQLAKE_CONFIG when the job's
    # own --config is not given, and $SEQLAKE_PROFILE: the global options reach all of them through
    # these variables, and a job's own --config wins.
    settings = {ENV_CONFIG: str(Path(config).absolute()) if config else None, ENV_PROFILE: profile}
    before = {name: os.environ.get(name) for name in settings}
    for name, value in settings.items():
        if value is not None:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run(command: str, rest: list[str]) -> int:
    try:
        return COMMANDS[command][0](rest)
    except SeqlakeError as error:
        print(f"seqlake {command}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"seqlake {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1
    except Exception as error:  # not a deliberate error: one line still, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        what = _one_line(str(error)) or "no message"
        print(
            f"seqlake {command}: unexpected {type(error).__name__}: {what} (set {DEBUG_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(text: str) -> str:
    """A multi-line message (DuckDB's, pyiceberg's) as one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


if __name__ == "__main__":
    sys.exit(main())
