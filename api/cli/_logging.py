"""Logging of ``txnstream serve``: one format for uvicorn's lines and the engine's, an
optional access log, and the startup banner.

:func:`log_config` is a ``logging.config.dictConfig`` dictionary that uvicorn applies
when it starts: a single stderr handler on the root logger with the chosen format
(``text``, or ``json``: one object per line), and uvicorn's loggers sending their records
there instead of to handlers of their own, so every line of the process looks the same.
The access log is the HTTP server's ``txnstream.access`` logger (one line per request,
with route status, duration and request id), on only with ``--access-log``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Literal

from txnstream.api import Engine

__all__ = ["JsonFormatter", "LogFormat", "log_config", "startup_banner"]

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
ACCESS_LOGGER = "txnstream.access"
"""The HTTP server's access logger (``api/http/_telemetry.py`` writes to it)."""

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName", "color_message"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the
    record's ``extra`` fields, and ``exception`` (the traceback text) if any."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line of JSON."""
        moment = datetime.fromtimestamp(record.created, UTC)
        body: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        elif record.stack_info:
            body["stack"] = record.stack_info
        return json.dumps(body, ensure_ascii=False, default=str)


def log_config(level: str, log_format: LogFormat, access_log: bool) -> dict[str, Any]:
    """The ``dictConfig`` of ``serve``: ``level`` for the process, one format, access
    lines on or off."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    level = level.upper()
    quieter = level if logging.getLevelName(level) >= logging.INFO else "INFO"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"txnstream": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "txnstream",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's own config gives these handlers and formats of their own; here
            # they hand their records to the root handler instead.
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level, "handlers": [], "propagate": True},
            "aiosqlite": {"level": quieter},  # its debug lines name every query
            # The access log does not follow --log-level: --access-log alone decides.
            ACCESS_LOGGER: {"level": "INFO" if access_log else "WARNING"},
        },
    }


def _version() -> str:
    try:
        return metadata.version("txnstream")
    except metadata.PackageNotFoundError:  # a bare checkout, not installed
        return "0+unknown"


def startup_banner(engine: Engine, url: str) -> tuple[str, dict[str, Any]]:
    """The line ``serve`` logs once the engine is open, and its fields for JSON logs:
    version, URL, absolute data directory, durability and what recovery did."""
    version = _version()
    data = str(engine.store_url) if engine.store_url is not None else str(engine.path.resolve())
    durability = engine.config.durability
    summary = engine.recovery
    recovery = None if summary is None else summary.as_dict()
    text = f"txnstream {version} serving {url} (console {url}/ui, docs {url}/docs)"
    text += f"; data {data}; durability {durability}"
    if engine.state.value == "standby":
        text += f"; standby (the active: {engine.active_url or 'not known yet'})"
    if summary is not None:
        text += (
            f"; recovered {summary.topics} topic{'' if summary.topics == 1 else 's'}"
            f" ({summary.from_snapshot} from a snapshot, {summary.entries_replayed} entries"
            f" replayed, {summary.open_txns} open transaction"
            f"{'' if summary.open_txns == 1 else 's'}) in {summary.seconds:.3f} s"
        )
    fields = {
        "version": version,
        "url": url,
        "data": data,
        "durability": durability,
        "recovery": recovery,
    }
    return text, fields
