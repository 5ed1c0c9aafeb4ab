"""The settings of the running command (--config, --profile, --log-level, --output), for any layer.

`seqlake.cli.options` fills them in from the command line; output and progress read them here, so
nothing below the CLI imports it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import click

from seqlake.core import logs

OUTPUTS = ("text", "json")


@dataclass
class Settings:
    config: str | None = None  # absolute path of the configuration file, if one was named
    profile: str | None = None
    log_level: str = logs.DEFAULT_LEVEL
    output: str = "text"
    command: str | None = None  # the command the group runs (for error messages)

    @property
    def json(self) -> bool:
        return self.output == "json"


_DEFAULT = Settings()


def settings() -> Settings:
    """The settings of the running command (the defaults outside one)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj if isinstance(obj, Settings) else _DEFAULT


def command_options() -> str:
    """The running command's --config and --profile as they are repeated in a hint of the next command
    (" --config lake.yaml --profile s3"; empty without them), so the hint runs on the same lake."""
    current = settings()
    options = f" --config {shlex.quote(current.config)}" if current.config else ""
    return options + (f" --profile {shlex.quote(current.profile)}" if current.profile else "")
