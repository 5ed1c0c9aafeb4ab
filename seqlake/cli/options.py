"""The options every command takes, before or after its name: --config, --profile, --log-level, --output.

`seqlake --config lake.yaml history ...` and `seqlake history --config lake.yaml ...` mean the same;
given in both places, the one after the command wins. The values live in one `Settings` object for
the whole invocation; `settings()` finds it from anywhere inside a command.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from seqlake.core import logs
from seqlake.core.invocation import OUTPUTS, Settings, settings

if TYPE_CHECKING:
    from seqlake.core.config import Config

ENV_CONFIG = "SEQLAKE_CONFIG"  # seqlake.core.config.ENV_CONFIG; not imported: `--help` loads no pydantic
ENV_PROFILE = "SEQLAKE_PROFILE"  # seqlake.core.config.ENV_PROFILE

F = TypeVar("F", bound=Callable[..., Any])


def load_cli_config() -> Config:
    """The configuration the command runs with: --config, else $SEQLAKE_CONFIG, ./seqlake.yaml or the
    packaged default; --profile laid over it."""
    from seqlake.core.config import load_config

    return load_config(settings().config)


def _set(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        root = ctx.find_root()
        if not isinstance(root.obj, Settings):
            root.obj = Settings()
        state: Settings = root.obj
        # Also in the environment, as $SEQLAKE_CONFIG and $SEQLAKE_PROFILE: whatever loads the
        # configuration by itself (and any worker or subprocess a job starts) reads them there.
        # Restored when the command ends.
        if field == "config":
            state.config = str(Path(value).absolute())
            _set_env(root, ENV_CONFIG, state.config)
        elif field == "profile":
            _set_env(root, ENV_PROFILE, value)
            state.profile = value
        elif field == "log_level":
            state.log_level = value
            logs.configure(value)
        else:
            state.output = value

    return store


def _set_env(root: click.Context, name: str, value: str) -> None:
    before = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

    root.call_on_close(restore)


def _setting_option(flag: str, field: str, help: str, **kind: Any) -> Callable[[F], F]:
    """An option that sets the invocation's Settings (`field`) as soon as it is parsed."""
    return click.option(flag, expose_value=False, is_eager=True, callback=_set(field), help=help, **kind)


def common_options(command: F) -> F:
    """Add the four shared options to a group or command (each sets the invocation's Settings)."""
    options = [
        _setting_option(
            "--config",
            "config",
            f"Configuration YAML (else ${ENV_CONFIG}, ./seqlake.yaml, or the packaged default).",
            metavar="FILE",
        ),
        _setting_option(
            "--profile",
            "profile",
            f"Where it runs: local, s3, cluster or rest (conf/profiles/; else ${ENV_PROFILE}).",
            metavar="NAME",
        ),
        _setting_option(
            "--log-level",
            "log_level",
            "Log messages at this level and above to stderr; Spark's level follows (default: warning).",
            type=click.Choice(logs.LEVELS),
        ),
        _setting_option(
            "--output",
            "output",
            "text for people, json: one JSON document on stdout (default: text).",
            type=click.Choice(OUTPUTS),
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
