"""One error root for everything seqlake raises on purpose, with a few precise subclasses."""


class SeqlakeError(Exception):
    """Base of every error seqlake raises deliberately; the CLI prints these without a traceback."""


class ConfigError(SeqlakeError):
    """The configuration is invalid; the message names the key and the offending value."""


class SetupError(SeqlakeError):
    """The environment is incomplete (missing jars, extensions, catalog); the message says how to fix it."""


class SchemaError(SeqlakeError):
    """An identifier from the user (column, feature group, table) does not exist in the schema."""
