"""The engine's one exception hierarchy.

Every error the engine raises on purpose derives from :class:`EngineError`; the HTTP
layer maps each class to a status and a contract code in one table (``api/http/_errors.py``);
the HTTP client (``txnstream.api.client``) raises the other way round, a status and code as
``TxnStreamHttpError``. The adapters' errors (marked ``[room]``) are defined in the room
that raises them, below this root; ``txnstream.api`` exports them all, lazily::

    * EngineError                     root
      x ClosedError                   the engine (or a subscription handle) was closed
      x DataDirLockedError            503: another process owns the data directory
      x InsufficientStorageError      507 insufficient_storage: no space left for a write
      x EngineFailedError             a background task or a durable write failed; reopen
        + DataDirectoryLostError      503: the data directory was deleted while in use
      x NotFoundError                 404 not_found
        + TopicNotFoundError
        + SubscriptionNotFoundError
        + TxnNotFoundError
      x TxnNotOpenError               409 txn_not_open: the transaction has ended
      x ForbiddenError                403 forbidden: another principal's transaction
      x FencedError                   409 fenced: a newer holder of the transactional id
      x ConflictError                 409 conflict
        + ConsumerBusyError           a second consumer on an exclusive subscription
        + AckConflictError            position pending in another open transaction
        + SubscriptionConflictError   subscription exists with other settings
        + OffloadNotConfiguredError   offloading asked of an engine with no offload URL
        + OffloadPrefixClaimedError   the offload prefix belongs to another data directory
      x TooLargeError                 413 too_large
      x InvalidArgumentError          400 invalid_request; also a ValueError and TypeError
      x LedgerError
        + CorruptEntryError           an entry failed to decode
        + RemoteStorageError          503 unavailable: the offload object store failed
          + CorruptObjectError        an offloaded object failed verification
      x SnapshotError
        + IncompatibleSnapshotError   a snapshot of an unknown format version
      x LeaseLostError                PostgreSQL store: a newer epoch holds the lease; step down
      x TxnStreamSourceError          [api.spark] the Spark data source: a bad option, path
                                      or answer
      x TxnStreamHttpError            [api.client] an error answer of a txnstream server
        + TxnStreamTransportError     [api.client] no answer: unreachable, or the
                                      connection failed
      x DrillError                    [api.cli.drills] a recovery drill could not run

Misuse of arguments raises :class:`InvalidArgumentError`, which is also a ``ValueError``
and a ``TypeError`` so callers may catch the builtin they expect.
"""

from __future__ import annotations

from typing import Any, ClassVar


class EngineError(Exception):
    """Root of every error the engine raises on purpose."""

    retriable: ClassVar[bool] = False


class ClosedError(EngineError):
    """The engine or handle was used after ``close()``."""


class DataDirLockedError(EngineError):
    """Another process (or engine) holds the data directory's lock; nothing was changed."""


class InsufficientStorageError(EngineError):
    """A write was refused for lack of disk space; reads still work, writes resume once
    space is freed."""

    retriable = True


class EngineFailedError(EngineError):
    """A durable write or background task failed; the engine refuses new work until reopened."""


class DataDirectoryLostError(EngineFailedError):
    """The data directory (its database file) was deleted, moved or replaced while the
    engine used it: nothing more is acknowledged, and the engine stays failed (reopening
    would start an empty directory) until it is restored and restarted."""


class NotFoundError(EngineError):
    """A named thing does not exist."""


class TopicNotFoundError(NotFoundError):
    """The topic does not exist (topics are created explicitly)."""


class SubscriptionNotFoundError(NotFoundError):
    """The subscription does not exist on that topic."""


class TxnNotFoundError(NotFoundError):
    """No transaction has that id (or it ended so long ago that it was forgotten)."""


class TxnNotOpenError(EngineError):
    """The transaction has ended (or is ending) the other way, or timed out."""


class ForbiddenError(EngineError):
    """The calling principal may not act on this: a transaction another principal began.

    Raised only when a call names a principal (the HTTP server with ``--auth`` does); the
    embedded API without one is unrestricted.
    """


class FencedError(EngineError):
    """The transaction was fenced: its ``transactional_id`` was taken by a newer begin."""


class ConflictError(EngineError):
    """The request conflicts with the current state."""


class ConsumerBusyError(ConflictError):
    """An exclusive subscription already has another consumer attached."""

    retriable = True


class AckConflictError(ConflictError):
    """An ack touches a position pending in another open transaction."""

    retriable = True


class SubscriptionConflictError(ConflictError):
    """The subscription exists with a different type or isolation."""


class TooLargeError(EngineError):
    """A message value or a request is larger than the configured limit."""


class InvalidArgumentError(EngineError, ValueError, TypeError):
    """An argument is malformed: bad name, position, value type or range."""


class LedgerError(EngineError):
    """Storage-level failure."""


class CorruptEntryError(LedgerError):
    """A stored entry could not be decoded (unknown format version or damaged bytes)."""


class RemoteStorageError(LedgerError):
    """The object store holding offloaded ledgers failed (unreachable, object missing,
    verification failed); nothing was switched, and reads of local ledgers go on."""

    retriable = True


class CorruptObjectError(RemoteStorageError):
    """An offloaded object (a ledger's Parquet object or its aborted-index sidecar) failed
    verification: its size, SHA-256, a page checksum, its decoding, or the positions its
    rows carry. Nothing of it is served; ``ledger_id`` and ``url`` name it."""

    retriable = False

    def __init__(self, message: str, *, ledger_id: int | None = None, url: str = "") -> None:
        super().__init__(message)
        self.ledger_id = ledger_id
        self.url = url

    def __reduce__(self) -> Any:
        return (_corrupt, (str(self), self.ledger_id, self.url))


def _corrupt(message: str, ledger_id: int | None, url: str) -> CorruptObjectError:
    return CorruptObjectError(message, ledger_id=ledger_id, url=url)


class OffloadNotConfiguredError(ConflictError):
    """Offloading was asked for but the engine has no ``offload_url``."""


class OffloadPrefixClaimedError(ConflictError):
    """The offload prefix is claimed by another data directory's store identity (its
    marker object says which): nothing is written there unless the engine runs with
    ``offload_takeover``."""


class SnapshotError(EngineError):
    """A snapshot could not be used."""


class IncompatibleSnapshotError(SnapshotError):
    """A snapshot was written in a format this version does not know."""


class LeaseLostError(EngineError):
    """A write of a server whose lease was taken over (PostgreSQL store): the lease row of
    ``scope`` no longer carries this writer's ``epoch`` (its fencing token), so the write
    transaction was rolled back and nothing of it is visible. The server steps down to
    standby; callers retry on the active.
    """

    retriable = True

    def __init__(self, message: str, scope: str, epoch: int) -> None:
        super().__init__(message)
        self.scope = scope
        self.epoch = epoch

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.scope, self.epoch)
