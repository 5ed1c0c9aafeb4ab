"""The history file format: spec, writer, reader and catalog registration (no Spark in here)."""
