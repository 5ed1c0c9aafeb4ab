"""The `seqlake` command line: one click group, one command per job (`jobs/*.py`), each with --help.

Commands load on first use: `seqlake --help` imports no job, engine or configuration code. Exit
status: 0 when the command did its work, 1 when it failed (a missing table, a corrupt file, a failed
check), 2 for a usage error (an unknown command or option, a bad option value). Every error is one
line on stderr, `seqlake COMMAND: error: ...`; SEQLAKE_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from seqlake.cli.options import Settings, common_options
from seqlake.core.errors import SeqlakeError, SetupError, UnreadableFileError

DEBUG_ENV = "SEQLAKE_DEBUG"
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 120}
PIPED_HELP_WIDTH = 120

# Top-level modules of the optional extras (pyproject.toml) and the extra that installs each.
EXTRAS = {
    "pyspark": "spark",
    "delta": "spark",
    "rocksdict": "sst",
    "matplotlib": "notebook",
    "nbclient": "notebook",
    "confluent_kafka": "kafka",
}

# name -> (module[:attribute] defining the click command, one-line summary for `seqlake --help`).
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("seqlake.jobs.init", "write a starter configuration (seqlake.yaml) and import mapping examples to edit"),
    "demo": ("seqlake.jobs.demo", "run the main job end to end on a warehouse of its own and print its report"),
    "generate": ("seqlake.jobs.generate", "write a deterministic synthetic event stream (raw source records)"),
    "import": ("seqlake.jobs.import_events", "import your own event files (Parquet, CSV, JSON Lines) via a mapping"),
    "ingest": (
        "seqlake.jobs.ingest",
        "ingest the raw source or a Kafka topic into the landing tier (Delta), with quarantine",
    ),
    "compact": ("seqlake.jobs.compact", "publish closed windows as sorted runs of the history table; merge runs"),
    "history": ("seqlake.jobs.history", "print one user's history (feature groups, columns, time range, Top-K, LSN)"),
    "sql": ("seqlake.jobs.sql", "DuckDB SQL over the warehouse with seqlake's views and macros loaded (sql/)"),
    "connect": ("seqlake.jobs.connect", "what DuckDB, pyiceberg or Spark needs to open this warehouse without seqlake"),
    "tables": ("seqlake.jobs.inspection:tables", "list the warehouse's tables: format, rows, files, size, snapshot"),
    "describe": ("seqlake.jobs.inspection:describe", "a table's schema, partitioning, properties and current snapshot"),
    "runs": ("seqlake.jobs.inspection:runs", "the live sorted runs of a history table: id, kind, windows, files, rows"),
    "files": (
        "seqlake.jobs.inspection:files",
        "the data files of a history table (or of one run), with rows and sizes",
    ),
    "maintain": ("seqlake.jobs.maintain", "expire snapshots, remove orphan files, vacuum landing, drop old detail"),
    "gc": (
        "seqlake.jobs.detail_gc",
        "drop detail windows past retention that no training pointer still needs, one commit",
    ),
    "forget": ("seqlake.jobs.forget", "remove every row of some users from every table, one commit per table"),
    "migrate": ("seqlake.jobs.migrate", "apply the configuration's columns (added, widened, retired) to the tables"),
    "fsck": ("seqlake.jobs.fsck", "check every invariant of the history table's files and runs"),
    "drop-run": ("seqlake.jobs.drop_run", "remove a damaged run from a history table so its windows can be rebuilt"),
    "capture": (
        "seqlake.jobs.capture",
        "capture your requests against the online view: pointers and fragments into training_<tenant>",
    ),
    "samples": (
        "seqlake.jobs.samples",
        "rebuild training samples from pointers, verified (versioned late materialization)",
    ),
    "backfill": (
        "seqlake.jobs.backfill",
        "sequences for any labelled table as of each row's time (event time or arrival), with a leakage report",
    ),
    "export-sst": ("seqlake.jobs.export_sst", "export a sorted run as RocksDB SST files for bulk loading"),
    "storage": ("seqlake.jobs.storage", "S3 bucket chores: create, list, empty (settings from the AWS_* variables)"),
}

# Other distributions add commands under this entry-point group: each entry is a dict like COMMANDS
# (the benchmarks in a checkout add the `bench-*` commands this way).
COMMAND_GROUP = "seqlake.commands"


@functools.cache
def commands() -> dict[str, tuple[str, str]]:
    """Every command: seqlake's own, then those other installed distributions add."""
    found = dict(COMMANDS)
    for entry in importlib.metadata.entry_points(group=COMMAND_GROUP):
        try:
            added = entry.load()
        except ImportError:  # a distribution's metadata without its code (e.g. a stale editable install)
            continue
        found.update({name: spec for name, spec in added.items() if name not in COMMANDS})
    return found


def missing_extra(error: ModuleNotFoundError) -> Exception:
    """A SetupError naming the extra to install when an optional dependency is missing."""
    top = (error.name or "").split(".")[0]
    if top not in EXTRAS:
        return error
    return SetupError(f"this command needs {top}: pip install 'seqlake[{EXTRAS[top]}]'")


def load_command(name: str) -> click.Command:
    """The click command `name` (imports its job module)."""
    module_name, _, attribute = commands()[name][0].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise missing_extra(error) from None
    return getattr(module, attribute or "command")


class LazyGroup(click.Group):
    """A group whose commands are imported when run (or asked for --help), never to list them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in commands():
            return None
        return load_command(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name not in commands():
            if name.startswith("-"):
                self.parse_args(ctx, args)  # an unknown global option: click says which
            close = difflib.get_close_matches(name, commands(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(commands())}"
            raise click.UsageError(f"unknown command {name!r} ({hint})", ctx)
        if isinstance(ctx.obj, Settings):
            ctx.obj.command = name
        return name, load_command(name), args[1:]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in commands().items()])


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from seqlake import __version__

    click.echo(f"seqlake {__version__}")
    ctx.exit(0)


@click.group(
    cls=LazyGroup,
    context_settings=CONTEXT,
    epilog="Run `seqlake COMMAND --help` for a command's options. The options above may also follow the command.",
)
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Print the version."
)
@common_options
def cli() -> None:
    """seqlake: sorted, compacted, versioned storage for long user-interaction histories."""


# -- running -----------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """A multi-line message (DuckDB's, pyiceberg's) as one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _param_name(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        longs = [opt for opt in param.opts if opt.startswith("--")]
        return (longs or param.opts)[0]
    return (param.human_readable_name or param.name or "argument").upper()


def usage_message(error: click.UsageError) -> str:
    """A click usage error as one line: `--user: must be an integer >= 0, got -5`."""
    if isinstance(error, click.BadParameter) and not isinstance(error, click.MissingParameter):
        if error.param is not None:
            return f"{_param_name(error.param)}: {_one_line(error.message)}"
        if isinstance(error.param_hint, str):
            return f"{error.param_hint}: {_one_line(error.message)}"
    return _one_line(error.format_message())


def _program(error: BaseException | None, fallback: str) -> str:
    ctx = getattr(error, "ctx", None)
    return ctx.command_path if isinstance(ctx, click.Context) else fallback


def _spark_driver_gone(error: BaseException) -> bool:
    """Whether `error` is PySpark losing its JVM: a connection error raised inside py4j."""
    import traceback

    if not isinstance(error, ConnectionError) and type(error).__name__ != "Py4JNetworkError":
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return any(f"{os.sep}py4j{os.sep}" in frame.filename for frame in frames)


def _unfinished_commit(error: BaseException) -> tuple[str, str] | None:
    """(kind, message) for a conflict, a catalog that stopped answering or a store that failed, which
    no job mapped where it committed (`seqlake.pipelines.commit_failures`): only the command's
    completed steps are known to be committed, and every job's re-run skips what they did."""
    from seqlake.pipelines.commit_failures import classify

    found = classify(error, anywhere=True)
    if found is None:
        return None
    cls, cause, _ = found
    return cls.__name__, (
        f"{cause} before the command finished; the steps it completed stay committed, the one under way "
        "may not have; running the command again is safe: it skips what is done"
    )


def run(command: click.Command, argv: Sequence[str] | None, prog_name: str, *, raise_errors: bool = False) -> int:
    """Run a click command on `argv` as the command line does; the exit status.

    Errors print one line on stderr (and, with `--output json`, an error document on stdout). With
    `raise_errors`, seqlake's own errors propagate instead (a job's `main()` called from Python).
    """
    from seqlake.core.progress import stop_all

    state = Settings()
    args = list(sys.argv[1:] if argv is None else argv)

    def running() -> str:  # the command's name once the group has found it
        return f"{prog_name} {state.command}" if state.command else prog_name

    try:
        # Help piped to a file or a test is not cut to 80 columns.
        width: dict[str, Any] = {} if sys.stdout.isatty() else {"terminal_width": PIPED_HELP_WIDTH}
        result = command.main(args=args, prog_name=prog_name, standalone_mode=False, obj=state, **width)
        return result if isinstance(result, int) else 0
    except click.exceptions.NoArgsIsHelpError as error:
        error.show()  # `seqlake` alone: the help, on stderr, as a usage error
        return 2
    except click.UsageError as error:
        where = _program(error, running())
        _fail(state, where, f"{usage_message(error)} (see {where} --help)", "UsageError")
        if raise_errors:
            raise SystemExit(2) from None
        return 2
    except SeqlakeError as error:
        if raise_errors or os.environ.get(DEBUG_ENV):
            raise
        _fail(state, running(), _one_line(str(error)), type(error).__name__)
        return 2 if isinstance(error, UnreadableFileError) else 1
    except click.exceptions.Abort:
        print(f"{running()}: interrupted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"{running()}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1
    except ModuleNotFoundError as error:
        extra = missing_extra(error)
        if extra is error or os.environ.get(DEBUG_ENV):
            raise
        if raise_errors:
            raise extra from None
        _fail(state, running(), str(extra), "SetupError")
        return 1
    except Exception as error:  # not a deliberate error: one line still, the traceback on request
        if os.environ.get(DEBUG_ENV) or raise_errors:
            raise
        what = _one_line(str(error)) or "no message"
        message = f"unexpected {type(error).__name__}: {what} (set {DEBUG_ENV}=1 for the traceback)"
        kind = type(error).__name__
        unfinished = None if _spark_driver_gone(error) else _unfinished_commit(error)
        if unfinished is not None:
            kind, message = unfinished
        elif _spark_driver_gone(error):
            message = (
                f"Spark's driver JVM stopped during the job ({type(error).__name__}); its log above says why, and "
                "for an OutOfMemoryError give it more heap: spark.driver_memory in the configuration"
            )
        _fail(state, running(), message, kind)
        return 1
    finally:
        stop_all()


def _fail(state: Settings, program: str, message: str, kind: str) -> None:
    if state.json:
        from seqlake.core.output import print_json

        print_json({"ok": False, "error": {"type": kind, "message": message}})
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`seqlake ARGS...`: the exit status."""
    return run(cli, argv, "seqlake")


def job_main(command: click.Command) -> Callable[[Sequence[str] | None], int]:
    """A job's `main(argv)`: its command run on `argv`, seqlake's errors raised to the caller, a usage
    error one line and SystemExit(2)."""

    def main(argv: Sequence[str] | None = None) -> int:
        return run(command, argv, f"seqlake {command.name}", raise_errors=True)

    main.__doc__ = f"`seqlake {command.name} ARGS...` from Python (errors raised)."
    return main


def script_main(name: str) -> Any:
    """`python jobs/NAME.py ARGS` and `spark-submit jobs/NAME.py ARGS`: the command `name`, exit status."""
    sys.exit(main([name, *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())
