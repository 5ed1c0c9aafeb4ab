"""Thin entry points: parse arguments, load config, build sessions, call pipelines, write results."""
