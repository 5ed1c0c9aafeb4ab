"""Forget users: remove their rows everywhere, record the request, and find rows a forget left."""
