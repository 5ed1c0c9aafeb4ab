"""Readers above the format: fresh reads (published history plus landing) and Spark's history reader."""
