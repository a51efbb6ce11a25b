"""Temporary alias for ``tests/api/conftest.py`` (lead: delete once it imports ``api.cli``)."""

from .cli import make_server as _make_server

__all__ = ["_make_server"]
