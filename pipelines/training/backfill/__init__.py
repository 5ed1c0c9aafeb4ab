"""Backfill sequences for labelled tables as of each row's time. `plan` is shared; `spark` runs it at scale."""
