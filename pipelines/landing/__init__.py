"""The landing tier (Delta): its tables, their writer, and which processing windows are closed."""
