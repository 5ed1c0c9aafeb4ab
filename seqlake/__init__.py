"""seqlake: a lakehouse table format and batch pipeline for long user-interaction histories."""

__version__ = "0.1.0"
