"""The public surface and the import graph (httpx's ``test_exported_members.py``, plus layers).

Everything installs under one import name, ``txnstream``; the layers are its subpackages
and point one way: ledger <- txn_buffer <- {dispatcher, snapshots} <- api. Inside ``api``
the adapters (``http``, ``kafka``, ``client``, ``cli``, ``spark``) use the engine only
through ``from txnstream.api import ...`` and the front-door helpers of
``txnstream.api.support``; cli may also use http and kafka (serve) and client, spark uses
client. Nobody imports another package's private modules, nor a layer
by a bare name.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

import txnstream
import txnstream.ledger
from txnstream import api

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("ledger", "txn_buffer", "dispatcher", "snapshots", "api")
ALLOWED = {
    "ledger": set(),
    "txn_buffer": {"ledger"},
    "dispatcher": {"ledger", "txn_buffer"},
    "snapshots": {"ledger", "txn_buffer"},
    "api": {"ledger", "txn_buffer", "dispatcher", "snapshots"},
}
ADAPTERS = {
    "http": set(),
    "kafka": set(),
    "client": set(),
    "cli": {"http", "kafka", "client"},
    "spark": {"client"},
}

# The embedded surface the README documents: the engine, its
# configuration and handles, the value types it returns, and the whole error tree.
DOCUMENTED_API = [
    "AbortedTxnRange",
    "AckConflictError",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "CorruptObjectError",
    "DataDirLockedError",
    "DataDirectoryLostError",
    "DrillError",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineFailedError",
    "EngineState",
    "FencedError",
    "ForbiddenError",
    "Grant",
    "FetchResult",
    "FetchedEntry",
    "FinishResult",
    "Health",
    "IncompatibleSnapshotError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "LedgerError",
    "Message",
    "NotFoundError",
    "OPERATIONS",
    "OffloadNotConfiguredError",
    "OffloadPrefixClaimedError",
    "OutgoingMessage",
    "PERMISSIONS",
    "PartitionMessage",
    "PartitionPosition",
    "Position",
    "Principal",
    "ProduceResult",
    "ProducerEpoch",
    "RecoverySummary",
    "RemoteStorageError",
    "RetentionPolicy",
    "SnapshotError",
    "SubscriptionConflictError",
    "SubscriptionHandle",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicOffsets",
    "TopicStats",
    "Transaction",
    "TxnId",
    "TxnInfo",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnState",
    "TxnStreamHttpError",
    "TxnStreamSourceError",
    "TxnStreamTransportError",
    "partition_for_key",
]


# The engine's methods: the embedded contract's, what the README documents, and what the
# front doors call (each HTTP and Kafka operation is one). Its parts (the store, the
# coordinator, the subscription registry) and the handles' paths into it are private.
ENGINE_METHODS = [
    # lifecycle and health
    "open",
    "close",
    "health",
    "storage_metrics",
    # several servers: a standby's view of the store (its Kafka listener's Metadata)
    "standby_catalog",
    # topics and their policies
    "create_topic",
    "delete_topic",
    "list_topics",
    "partitioned_topics",
    "partitions_of",
    "parent_of",
    "stats",
    "topic_stats",
    "set_retention",
    "apply_retention",
    "set_ttl",
    "ttl",
    "apply_ttl",
    "set_offload",
    "offload",
    "list_ledgers",
    "take_snapshot",
    # producing
    "send",
    "send_many",
    "send_batch",
    "produce",
    "produce_values",
    "produce_start",
    "last_sequence",
    # transactions
    "begin",
    "transaction",
    "commit",
    "abort",
    "finish",
    "get_transaction",
    "transactions",
    "iter_transactions",
    # producer epochs of transactional ids (the Kafka listener's, durable)
    "producer_epoch",
    "bump_producer_epoch",
    "producer_transaction",
    "expire_producer_epochs",
    "sync",
    # consuming
    "subscribe",
    "create_subscription",
    "subscription_policy",
    "delete_subscription",
    "receive",
    "ack",
    "nack",
    "release",
    "seek",
    "fetch",
    # offsets (the Kafka listener's view of a topic)
    "offsets",
    "offset_of",
    "position_at",
    "committed_offset",
    "commit_offset",
    "watch",
]


def test_the_engine_shows_only_its_methods() -> None:
    """``help(Engine)`` lists the methods above and nothing of its insides."""
    public = sorted(n for n in dir(api.Engine) if not n.startswith("_"))
    assert public == sorted(ENGINE_METHODS)


def test_help_shows_each_engine_method_with_its_signature_and_docstring() -> None:
    """The engine's methods are its parts' (``txnstream.api._engine``): ``help(Engine)``
    and ``inspect`` still show each as a method of the engine, with its parameters (no
    ``*args``) and its docstring."""
    text = pydoc.render_doc(api.Engine, renderer=pydoc.plaintext)
    for name in ENGINE_METHODS:
        method = getattr(api.Engine, name)
        assert inspect.isroutine(method), name
        doc = inspect.getdoc(method)
        assert doc, f"Engine.{name} has no docstring"
        parameters = inspect.signature(method).parameters.values()
        assert all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters), name
        assert f"{name}(" in text, name
        assert doc.splitlines()[0] in text, name


def test_api_exports_exactly_the_documented_surface() -> None:
    assert sorted(api.__all__) == sorted(DOCUMENTED_API)
    for name in api.__all__:
        assert getattr(api, name) is not None


def test_the_package_root_is_the_embedded_surface() -> None:
    assert txnstream.__all__ == api.__all__
    for name in txnstream.__all__:
        assert getattr(txnstream, name) is getattr(api, name)


@pytest.mark.parametrize("package", LAYERS)
def test_every_package_has_a_sorted_complete_all(package: str) -> None:
    module = importlib.import_module(f"txnstream.{package}")
    names = module.__all__
    assert names == sorted(names), f"{package}.__all__ is not sorted"
    assert len(set(names)) == len(names)
    public = {
        n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, type(sys))
    }
    assert public <= set(names) | {"annotations"}, f"{package} exports names outside __all__"
    for name in names:  # those loaded on first use too (PEP 562)
        assert getattr(module, name) is not None, f"{package}.{name}"


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import in a file (``level`` > 0: relative)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


def _room(path: Path) -> tuple[str, str | None]:
    """The layer a file belongs to and, inside ``api``, its adapter subpackage (if any)."""
    parts = path.relative_to(REPO).parts
    room = parts[1] if parts[0] == "api" and len(parts) > 2 else None
    return parts[0], room


def _sources() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (REPO / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_down_and_adapters_use_the_api_root(path: Path) -> None:
    layer, room = _room(path)
    where = path.relative_to(REPO)
    for module, level in _imports(path):
        if level:
            continue  # relative: inside its own package
        top, _, rest = module.partition(".")
        assert top not in LAYERS, f"{where}: bare import {module} (it is txnstream.{module})"
        if top != "txnstream":
            continue
        if not rest:  # the root re-exports txnstream.api: only api's adapters may use it
            assert room is not None, f"{where}: {layer} imports the txnstream root"
            continue
        top, _, rest = rest.partition(".")
        if room is not None:
            # an adapter: the api root, or an adapter it may use
            sub = rest.split(".")[0]
            ok = module in ("txnstream.api", "txnstream.api.support") or (
                top == "api" and sub in ADAPTERS[room] | {room}
            )
            assert ok, f"{where}: adapter {room} imports {module}"
            continue
        if top == layer:
            continue
        assert top in ALLOWED[layer], f"{where}: {layer} imports {module}"
        assert not rest.startswith("_"), f"{where}: private import {module}"


def test_the_api_root_imports_no_adapter_dependency() -> None:
    code = (
        "import sys, txnstream\n"
        "heavy = [m for m in ('fastapi', 'typer', 'httpx', 'pyspark', 'pyarrow', 'uvicorn',"
        " 'kafka')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_the_adapters_errors_live_in_their_rooms_and_load_light() -> None:
    """``txnstream.api`` exports the client's, the Spark source's and the drills' errors,
    defined in the rooms that raise them (``txnstream.ledger._errors`` documents the one
    tree); naming them loads neither httpx nor pyspark."""
    code = (
        "import sys, txnstream\n"
        "from txnstream import DrillError, TxnStreamHttpError, TxnStreamSourceError\n"
        "from txnstream import TxnStreamTransportError\n"
        "rooms = [c.__module__ for c in (TxnStreamHttpError, TxnStreamTransportError,"
        " TxnStreamSourceError, DrillError)]\n"
        "assert all(issubclass(c, txnstream.EngineError) for c in (TxnStreamHttpError,"
        " TxnStreamSourceError, DrillError))\n"
        "print(','.join(rooms))\n"
        "print(','.join(m for m in ('httpx', 'pyspark') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    rooms, heavy = done.stdout.splitlines()
    assert rooms.split(",") == [
        "txnstream.api.client._errors",
        "txnstream.api.client._errors",
        "txnstream.api.spark._errors",
        "txnstream.api.cli.drills._errors",
    ]
    assert heavy == ""
    assert not {"TxnStreamHttpError", "DrillError", "SPARK_COLUMNS"} & set(dir(txnstream.ledger))
