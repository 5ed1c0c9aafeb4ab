"""Rebuild training samples from pointers (versioned late materialization).

`plan` holds the rules both engines share; `duckdb` and `spark` run them.
"""
