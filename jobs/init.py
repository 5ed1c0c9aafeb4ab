"""Write a starter configuration to edit: DIR/seqlake.yaml and the import mapping examples in DIR/mappings/.

Run seqlake commands from DIR (they find ./seqlake.yaml), or name the file with `--config` or
SEQLAKE_CONFIG. Relative paths in it (the warehouse) resolve against DIR. Existing files are kept
unless `--force`.
"""

from __future__ import annotations

from pathlib import Path

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options
from seqlake.core import resources
from seqlake.core.errors import SeqlakeError
from seqlake.core.output import emit

MAPPINGS_FOLDER = "mappings"


def starter_files() -> dict[str, str]:
    """Relative path -> text of every file `seqlake init` writes."""
    from seqlake.core.config import LOCAL_CONFIG_NAME  # pydantic: not for --help

    files = {LOCAL_CONFIG_NAME: resources.default_config().read_text()}
    for mapping in resources.mapping_files():
        files[f"{MAPPINGS_FOLDER}/{mapping.name}"] = mapping.read_text()
    return files


def write_starter(folder: str | Path, *, force: bool = False) -> list[Path]:
    """Write the starter files into `folder` (created if needed); the paths written.

    Raises SeqlakeError, writing nothing, if one of them exists and `force` is false.
    """
    folder = Path(folder)
    files = {folder / name: text for name, text in starter_files().items()}
    existing = [str(path) for path in files if path.exists()]
    if existing and not force:
        raise SeqlakeError(f"{', '.join(existing)} already exist(s): edit them, or pass --force to overwrite")
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    except OSError as error:
        raise SeqlakeError(f"cannot write the starter configuration in {folder}: {error.strerror or error}") from None
    return list(files)


@click.command("init", help=__doc__)
@click.argument("folder", metavar="[DIR]", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
@common_options
def command(folder: str, force: bool) -> None:
    written = write_starter(folder, force=force)
    config = written[0]

    def text() -> None:
        for path in written:
            print(f"wrote {path}")
        print(
            f"\nEdit {config}, then run seqlake from {config.parent} (or pass --config {config}); "
            f"its warehouse is {config.parent / 'warehouse'}."
        )

    emit(
        {"written": [str(p) for p in written], "config": str(config), "warehouse": str(config.parent / "warehouse")},
        text,
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("init")
