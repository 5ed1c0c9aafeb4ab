"""Write a starter configuration to edit: DIR/seqlake.yaml and the import mapping examples in DIR/mappings/.

Run seqlake commands from DIR (they find ./seqlake.yaml), or name the file with `--config` or
SEQLAKE_CONFIG. Relative paths in it (the warehouse) resolve against DIR. Existing files are kept
unless `--force`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from seqlake import resources
from seqlake.cli_args import ArgumentParser
from seqlake.config import LOCAL_CONFIG_NAME
from seqlake.errors import SeqlakeError

MAPPINGS_FOLDER = "mappings"


def starter_files() -> dict[str, str]:
    """Relative path -> text of every file `seqlake init` writes."""
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


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake init", description=__doc__)
    parser.add_argument("dir", nargs="?", default=".", help="folder to write into (default: the current one)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    args = parser.parse_args(argv)
    written = write_starter(args.dir, force=args.force)
    for path in written:
        print(f"wrote {path}")
    config = written[0]
    print(
        f"\nEdit {config}, then run seqlake from {config.parent} (or pass --config {config}); "
        f"its warehouse is {config.parent / 'warehouse'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
