"""Versioned late materialization: captures at inference, normalized training tables, reconstruction."""
