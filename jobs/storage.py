"""S3 bucket chores: create a bucket, list or empty it (optionally under a prefix).

Settings come from the AWS_* variables and the standard AWS configuration chain (seqlake.engines.storage);
no secret is ever printed.
"""

from __future__ import annotations

from typing import Any

import click

from seqlake.cli import job_main
from seqlake.cli.options import common_options
from seqlake.core.errors import SetupError
from seqlake.core.output import emit

ACTIONS = ("create", "list", "empty")


@click.command("storage", help=__doc__)
@click.argument("action", type=click.Choice(ACTIONS))
@click.argument("bucket")
@click.option("--prefix", default="", help="List or empty only the objects under this prefix.")
@common_options
def command(action: str, bucket: str, prefix: str) -> None:
    from seqlake.engines.storage import create_bucket, empty_bucket, list_objects

    try:
        if action == "create":
            create_bucket(bucket)
            emit({"action": action, "bucket": bucket}, f"bucket s3://{bucket} ready")
        elif action == "list":
            objects = list_objects(bucket, prefix)
            document: dict[str, Any] = {"action": action, "bucket": bucket, "prefix": prefix, "objects": objects}
            emit(document, "\n".join(f"{size:>12} s3://{bucket}/{key}" for key, size in objects) or "(no objects)")
        else:
            deleted = empty_bucket(bucket, prefix)
            document = {"action": action, "bucket": bucket, "prefix": prefix, "deleted": deleted}
            emit(document, f"deleted {deleted} objects from s3://{bucket}/{prefix}")
    except SetupError:
        raise
    except Exception as error:  # boto3's errors: one line, never a credential
        raise SetupError(f"s3://{bucket}: {type(error).__name__}: {' '.join(str(error).split())}") from None


main = job_main(command)
