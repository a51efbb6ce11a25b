"""Kafka listener addresses: ``HOST:PORT`` (``[v6]:PORT``) read and written."""

from __future__ import annotations


def parse_address(text: str, what: str = "--kafka-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as ``(host, port)``; ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT, not {text!r}")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    """``(host, port)`` as ``HOST:PORT`` (``[v6]:PORT``), the form :func:`parse_address`
    reads back."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
