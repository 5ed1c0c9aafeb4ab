"""Capture at inference: the online view, pointers and fragments, capture steps and the serving simulation."""
