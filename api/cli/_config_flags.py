"""How ``serve``'s options are declared: once, with help, choices, default, environment
variable and config-file key, so that a new flag cannot miss one of them.

- ``serve``'s own options are ordinary typer options in its signature, each with a
  ``help``; a fixed set of values is a ``Literal`` (typer shows it as ``<a|b>``).
- Every :class:`~txnstream.api.EngineConfig` field becomes a flag too, generated from the
  dataclass (one table, :data:`HELP`, not one hand-written option per field, so a new
  setting cannot be forgotten); the command receives the ones given as
  ``engine_settings`` (unset ones keep the config's defaults, and :class:`EngineConfig`
  itself validates them).
- :func:`serve_options` then gives every option its environment variable
  (``TXNSTREAM_<NAME>`` unless it names one) and shows it and the default in ``--help``,
  and adds ``--config FILE``: a TOML file whose keys are the flags' names
  (``port = 8081``, ``log-level = "debug"``, ``min-free-bytes = 0``).

Precedence, highest first: the command line, the environment, the config file, the
defaults (click's own order for ``default_map``, which is what the file fills).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from txnstream.api import EngineConfig, RetentionPolicy

from ._common import parse_duration_ms, parse_size_bytes

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
    "producer_expiry": "Seconds after its last batch that an idempotent producer's"
    " sequence numbers are forgotten (Kafka's producer.id.expiration.ms).",
    "transactional_id_expiry": "Seconds after its last use that the Kafka listener forgets"
    " an idle transactional id (Kafka's transactional.id.expiration.ms).",
    "max_pending_entries": "Backpressure: appends wait while this many await their commit.",
    "retention_check_interval": "Seconds between retention passes.",
    "ttl_check_interval": "Seconds between message TTL passes (topics with a TTL).",
    "min_free_bytes": "Refuse new data (507) while the disk has less free space; 0: off.",
    "auto_recover": "Reopen and recover in place after a storage failure.",
    "offload_url": "Object store for offloaded ledgers: a directory (file:///dir or a"
    " path) or s3://bucket/prefix (credentials and endpoint from AWS_* variables).",
    "offload_check_interval": "Seconds between background offload passes.",
    "offload_takeover": "Offload into a prefix another data directory claimed (its"
    " __txnstream_owner.json marker): only when that one is gone for good.",
    "writer": "Where SQLite writes run: thread (in this process) or process (a child"
    " process, so they do not share the event loop's core).",
    "gc_freeze": "Freeze the recovered state out of Python's full garbage collections,"
    " and collect the young generation less often.",
    "lease_timeout": "PostgreSQL store: seconds the active's lease lasts unrenewed (it renews"
    " every third of it); a standby takes over once it expired.",
    "advertise_url": "PostgreSQL store: the URL clients are sent to while this server is"
    " the active (stored in the lease; default http://HOST:PORT).",
    "kafka_advertise": "HOST:PORT Kafka clients are told to connect to (needs --kafka-listen;"
    " default: its address). PostgreSQL store: stored in the lease, so that standbys send"
    " Kafka clients to the active.",
    "default_retention": "Retention of topics without their own: an age (7d), a size"
    " (10GiB) or both (7d,10GiB); acknowledged sealed ledgers beyond it are deleted.",
}
"""One line of help per field (a test checks every field has one)."""

SERVE_DEFAULTS: dict[str, Any] = {"writer": "process"}
"""Where ``serve`` departs from :class:`EngineConfig`'s defaults: a server's event loop is
busy with HTTP, so its SQLite writes go to a child process."""

ENV_PREFIX = "TXNSTREAM_"


def config_fields() -> list[tuple[str, Any]]:
    """``(name, type)`` of every :class:`EngineConfig` field (``X | None`` as ``X``; a
    ``Literal`` kept, so that its values are the flag's choices)."""
    hints = typing.get_type_hints(EngineConfig)
    out = []
    for field in dataclasses.fields(EngineConfig):
        hint = hints[field.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) is typing.Literal:
            base: Any = hint
        elif args and typing.get_origin(hint) is not None:  # X | None
            base = args[0]
        else:
            base = hint
        out.append((field.name, base))
    return out


def parse_retention(text: str) -> RetentionPolicy:
    """``--default-retention``'s value: ``7d``, ``10GiB`` or ``7d,10GiB``."""
    age: float | None = None
    size: int | None = None
    for part in (p.strip() for p in text.split(",")):
        if part[-1:].lower() in ("s", "m", "h", "d") and not part.lower().endswith(("b", "ib")):
            age = parse_duration_ms(part, option="--default-retention") / 1000
        else:
            size = parse_size_bytes(part, option="--default-retention")
    return RetentionPolicy(max_age=age, max_bytes=size)


PARSED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "default_retention": ("SPEC", parse_retention),
}
"""Fields whose flag takes text made into the field's type (metavar, parser)."""


def _engine_options() -> list[tuple[str, Any]]:
    """``(name, annotated hint)`` of the flag of every :class:`EngineConfig` field."""
    out = []
    defaults = EngineConfig()
    for name, base in config_fields():
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if base is bool else [flag]
        default = SERVE_DEFAULTS.get(name, getattr(defaults, name))
        # The default is None (unset: the config's own applies), so say it in the help.
        help_text = f"{HELP[name]} [default: {default}]"
        if name in PARSED:
            metavar, _ = PARSED[name]
            option = typer.Option(*decls, metavar=metavar, help=help_text)
            out.append((name, Annotated[str | None, option]))
        else:
            option = typer.Option(*decls, help=help_text)
            out.append((name, Annotated[base | None, option]))
    return out


def _load_config(ctx: typer.Context, value: Path | None) -> Path | None:
    """``--config FILE``: the file's settings become the command's defaults."""
    if value is None:
        return None
    try:
        settings = tomllib.loads(value.read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {value}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{value} is not valid TOML: {exc}") from None
    names = {}  # "log-level" -> "log_level", for every option but --config itself
    for param in ctx.command.params:
        for opt in param.opts:
            if opt.startswith("--") and param.name not in (None, "config"):
                names[opt[2:].split("/")[0]] = param.name
    defaults: dict[str, Any] = {}
    for key, setting in settings.items():
        name = names.get(key.replace("_", "-"))
        if name is None:
            raise typer.BadParameter(f"{value}: unknown setting {key!r} (keys are flag names)")
        if isinstance(setting, dict):
            raise typer.BadParameter(f"{value}: {key} must be a value, not a table")
        defaults[name] = setting
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


CONFIG_OPTION = typer.Option(
    "--config",
    metavar="FILE",
    is_eager=True,  # read before the other options, whose defaults it provides
    callback=_load_config,
    exists=True,
    dir_okay=False,
    help="TOML file of settings, keys named as the flags (port = 8081,"
    ' log-level = "debug"); flags and environment variables override it.',
)


def _option_of(hint: Any) -> Any:
    """The typer option in an ``Annotated`` hint, or None."""
    for extra in getattr(hint, "__metadata__", ()):
        if isinstance(extra, typer.models.OptionInfo):
            return extra
    return None


def serve_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with a flag per :class:`EngineConfig` field (passed on as
    ``engine_settings={field: value}`` for those given), ``--config FILE``, and every
    option's environment variable, shown in ``--help`` with its default."""
    signature = inspect.signature(command)
    annotations = {
        name: hint
        for name, hint in typing.get_type_hints(command, include_extras=True).items()
        if name != "engine_settings"
    }
    # The resolved hints, not the strings of ``from __future__ import annotations``: typer
    # reads the signature, and a string hint loses the option's help and settings.
    params = [
        p.replace(annotation=annotations[p.name])
        for p in signature.parameters.values()
        if p.name != "engine_settings"
    ]
    engine = _engine_options()
    for name, hint in [*engine, ("config", Annotated[Path | None, CONFIG_OPTION])]:
        annotations[name] = hint
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
        )
    names = [name for name, _ in engine]
    for param in params:
        option = _option_of(annotations.get(param.name))
        if option is None:
            continue
        if option.envvar is None:
            option.envvar = ENV_PREFIX + param.name.upper()
        option.show_envvar = True
        if param.default is None and param.name not in names:
            option.show_default = "none"  # unset (engine flags say their own in the help)
        elif option.show_default is not False:
            option.show_default = True

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        kwargs.pop("config", None)  # already applied, as the other options' defaults
        settings = {n: kwargs.pop(n) for n in names if kwargs.get(n) is not None}
        for n in names:
            kwargs.pop(n, None)
        for n, (_, parse) in PARSED.items():
            if n in settings:
                settings[n] = parse(settings[n])
        command(**kwargs, engine_settings=settings)

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=sorted(params, key=lambda p: p.kind)
    )
    wrapper.__annotations__ = annotations
    del wrapper.__wrapped__  # typer must see the new signature, not the original's
    return wrapper
