"""The demo: synthetic events, the end-to-end run on either engine, and its report."""
