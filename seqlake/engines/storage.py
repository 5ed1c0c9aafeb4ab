"""Object storage (the S3 API) for every engine, from one set of settings, and the bucket chores.

Settings come only from the environment and the standard AWS configuration chain, never from
seqlake's configuration files:

  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   credentials (else the AWS chain:
                                                                ~/.aws, instance roles, ...)
  AWS_REGION or AWS_DEFAULT_REGION                              region (default us-east-1)
  AWS_ENDPOINT_URL                                              an S3-compatible server (MinIO, ...)

pyiceberg's FileIO gets them as `s3.*` catalog properties, seqlake's reader and writer as a pyarrow
S3FileSystem, DuckDB as a secret of its httpfs extension. Secrets are never printed: errors name the
setting, not its value.

`seqlake storage create|list|empty BUCKET` (jobs/storage.py) does the bucket chores with boto3.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from seqlake.core.errors import SetupError

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Settings:
    endpoint: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None = None
    session_token: str | None = None

    def __repr__(self) -> str:  # never shows the secret or the token
        return f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, access_key_id={self.access_key_id!r})"

    @classmethod
    def from_env(cls) -> S3Settings:
        env = os.environ
        return cls(
            endpoint=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    def pyiceberg_properties(self) -> dict[str, str]:
        """Catalog properties for pyiceberg's S3 FileIO (unset ones left to the AWS chain)."""
        props = {
            "s3.endpoint": self.endpoint,
            "s3.region": self.region,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
        }
        return {key: value for key, value in props.items() if value}

    def arrow_filesystem(self) -> pafs.S3FileSystem:
        options: dict[str, object] = {"region": self.region}
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            options["endpoint_override"] = parts.netloc or parts.path
            options["scheme"] = parts.scheme or "https"
        if self.access_key_id:
            options.update(access_key=self.access_key_id, secret_key=self.secret_access_key)
            if self.session_token:
                options["session_token"] = self.session_token
        return pafs.S3FileSystem(**options)

    def duckdb_secret(self, sql_literal) -> str:
        """CREATE SECRET for DuckDB's httpfs: the same endpoint, region and credentials."""
        fields = {"TYPE": "s3", "REGION": sql_literal(self.region)}
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            fields["ENDPOINT"] = sql_literal(parts.netloc or parts.path)
            fields["USE_SSL"] = "true" if parts.scheme != "http" else "false"
            fields["URL_STYLE"] = sql_literal("path")
        if self.access_key_id:
            fields["KEY_ID"] = sql_literal(self.access_key_id)
            fields["SECRET"] = sql_literal(self.secret_access_key or "")
            if self.session_token:
                fields["SESSION_TOKEN"] = sql_literal(self.session_token)
        else:
            fields["PROVIDER"] = "credential_chain"
        return "CREATE OR REPLACE SECRET seqlake_s3 (" + ", ".join(f"{k} {v}" for k, v in fields.items()) + ")"

    def delta_storage_options(self) -> dict[str, str]:
        """Storage options for delta-rs (the in-process landing writer). Its Delta log on S3 assumes one
        writing process at a time, as Spark's default S3 log store does (`seqlake ingest` runs so)."""
        options = {"AWS_REGION": self.region, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
            if self.endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id:
            options.update(AWS_ACCESS_KEY_ID=self.access_key_id, AWS_SECRET_ACCESS_KEY=self.secret_access_key or "")
            if self.session_token:
                options["AWS_SESSION_TOKEN"] = self.session_token
        return options

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
        )


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def bucket_and_key(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    return parts.netloc, parts.path.lstrip("/")


@cache
def _filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    return settings.arrow_filesystem()


def s3_filesystem() -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem for the current settings (one per distinct settings)."""
    return _filesystem(S3Settings.from_env())


# Error codes S3 answers for credentials it refuses, and the setting each points at.
_REFUSED = {
    "InvalidAccessKeyId": "AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
    "403": "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
    "InvalidToken": "AWS_SESSION_TOKEN",
    "ExpiredToken": "AWS_SESSION_TOKEN",
}


@cache
def _checked(settings: S3Settings, bucket: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        # A listing, not HEAD: its error body says which part of the credentials was refused.
        settings.client().list_objects_v2(Bucket=bucket, MaxKeys=1)
    except NoCredentialsError:
        raise SetupError(
            f"no S3 credentials for s3://{bucket}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or configure the standard AWS credential chain)"
        ) from None
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in _REFUSED:
            raise SetupError(f"S3 refused the credentials for s3://{bucket} ({code}): check {_REFUSED[code]}") from None
        if code in ("404", "NoSuchBucket"):
            raise SetupError(
                f"bucket s3://{bucket} does not exist at {settings.endpoint or 'AWS'}: "
                f"create it (seqlake storage create {bucket}) or check AWS_ENDPOINT_URL"
            ) from None
        raise SetupError(f"s3://{bucket}: {code or error}") from None
    except BotoCoreError as error:
        raise SetupError(f"cannot reach S3 for s3://{bucket} (check AWS_ENDPOINT_URL): {error}") from None


def check_access(uri: str) -> None:
    """Fail with one line naming the setting when S3 refuses the credentials or lacks the bucket."""
    _checked(S3Settings.from_env(), bucket_and_key(uri)[0])


# -- bucket chores -------------------------------------------------------------------------------


def create_bucket(bucket: str, settings: S3Settings | None = None) -> None:
    settings = settings or S3Settings.from_env()
    client = settings.client()
    extra = (
        {}
        if settings.region == DEFAULT_REGION
        else {"CreateBucketConfiguration": {"LocationConstraint": settings.region}}
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket, **extra)


def list_objects(bucket: str, prefix: str = "", settings: S3Settings | None = None) -> list[tuple[str, int]]:
    """(key, size) of every object under `prefix`."""
    client = (settings or S3Settings.from_env()).client()
    out: list[tuple[str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend((item["Key"], item["Size"]) for item in page.get("Contents", []))
    return out


def empty_bucket(bucket: str, prefix: str = "", settings: S3Settings | None = None) -> int:
    """Delete every object under `prefix`; the number deleted."""
    client = (settings or S3Settings.from_env()).client()
    keys = [key for key, _ in list_objects(bucket, prefix, settings)]
    for start in range(0, len(keys), 1000):  # the API's batch limit
        chunk = keys[start : start + 1000]
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key} for key in chunk], "Quiet": True})
    return len(keys)
