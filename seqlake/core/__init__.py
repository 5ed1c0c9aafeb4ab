"""Ground floor: configuration, errors, events, URIs, payload rules and console output.

Imports nothing else of seqlake.
"""
