"""Every :class:`~txnstream.api.EngineConfig` field as a ``serve`` flag and a ``TXNSTREAM_<FIELD>``
environment variable, generated from the dataclass (one table, not one hand-written
option per field, so a new setting cannot be forgotten).

:func:`with_config_flags` adds the options to a typer command's signature; the command
receives the ones given as ``engine_settings`` (unset ones keep the config's defaults,
and :class:`EngineConfig` itself validates them).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from txnstream.api import EngineConfig

HELP = {
    "durability": "full (survives power loss) or normal (survives kill -9).",
    "ledger_max_entries": "Entries per ledger before a new one starts.",
    "ledger_max_bytes": "Bytes per ledger before a new one starts.",
    "snapshot_every": "Take a snapshot after this many ended transactions on a topic.",
    "snapshot_interval": "... or this many seconds after a change, whichever comes first.",
    "default_txn_timeout": "Seconds a transaction may stay open when it names no timeout.",
    "max_txn_timeout": "The longest transaction timeout a client may ask for (seconds).",
    "max_message_bytes": "The largest message value (413 too_large beyond).",
    "max_request_bytes": "The largest HTTP request body (413 too_large beyond).",
    "max_messages_per_request": "Messages one produce or batch request may carry (413 beyond).",
    "consumer_expiry": "Seconds after which an HTTP consumer that does not poll is detached.",
    "ended_txn_retention": "Seconds ended transactions are remembered (idempotent ends).",
    "max_pending_entries": "Backpressure: appends wait while this many await their commit.",
    "retention_check_interval": "Seconds between retention passes.",
    "min_free_bytes": "Refuse new data (507) while the disk has less free space; 0: off.",
    "auto_recover": "Reopen and recover in place after a storage failure.",
    "offload_url": "Object store for offloaded ledgers: a directory (file:///dir or a"
    " path) or s3://bucket/prefix (credentials and endpoint from AWS_* variables).",
    "offload_check_interval": "Seconds between background offload passes.",
    "offload_takeover": "Offload into a prefix another data directory claimed (its"
    " __txnstream_owner.json marker): only when that one is gone for good.",
    "writer": "Where SQLite writes run: thread (in this process) or process (a child"
    " process, so they do not share the event loop's core).",
    "gc_freeze": "Freeze the recovered state out of Python's full garbage collections.",
}
"""One line of help per field (a test checks every field has one)."""

SERVE_DEFAULTS: dict[str, Any] = {"writer": "process"}
"""Where ``serve`` departs from :class:`EngineConfig`'s defaults: a server's event loop is
busy with HTTP, so its SQLite writes go to a child process."""


def config_fields() -> list[tuple[str, type]]:
    """``(name, type)`` of every :class:`EngineConfig` field (``Literal`` as ``str``)."""
    hints = typing.get_type_hints(EngineConfig)
    out = []
    for field in dataclasses.fields(EngineConfig):
        hint = hints[field.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) is typing.Literal:
            base: type = str
        elif args and typing.get_origin(hint) is not None:  # X | None
            base = args[0]
        else:
            base = hint
        out.append((field.name, base))
    return out


def with_config_flags(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with one option per :class:`EngineConfig` field added; it is called
    with ``engine_settings={field: value}`` for the options that were given."""
    signature = inspect.signature(command)
    annotations = {
        name: hint
        for name, hint in typing.get_type_hints(command, include_extras=True).items()
        if name != "engine_settings"
    }
    # The command's own parameters with their annotations resolved: typer reads options
    # (help, envvar, names) from ``__signature__`` as it is, and under ``from __future__
    # import annotations`` those are strings it cannot see into (every option's envvar,
    # TXNSTREAM_AUTH_FILE included, was ignored).
    params = [
        p.replace(annotation=annotations[p.name])
        for p in signature.parameters.values()
        if p.name != "engine_settings"
    ]
    names = []
    for name, base in config_fields():
        names.append(name)
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if base is bool else [flag]
        default = SERVE_DEFAULTS.get(name, getattr(EngineConfig(), name))
        option = typer.Option(
            *decls,
            envvar=f"TXNSTREAM_{name.upper()}",
            show_envvar=True,
            help=f"{HELP[name]} [default: {default}]",
        )
        hint = Annotated[base | None, option]  # type: ignore[valid-type]
        annotations[name] = hint
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
        )

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        settings = {n: kwargs.pop(n) for n in names if kwargs.get(n) is not None}
        for n in names:
            kwargs.pop(n, None)
        command(**kwargs, engine_settings=settings)

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=sorted(params, key=lambda p: p.kind)
    )
    wrapper.__annotations__ = annotations
    del wrapper.__wrapped__  # typer must see the new signature, not the original's
    return wrapper
