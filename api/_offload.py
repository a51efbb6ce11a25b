"""Offloading: closed ledgers move to the object store (tiered storage).

One ledger at a time, oldest first, under the engine's tier lock (retention and topic
deletion take it too):

1. read the ledger's entries and aborted-index rows (the read connections);
2. build its Parquet object (and the sidecar when it has aborts), upload, read back and
   verify size and checksum — in a worker thread, never on the event loop;
3. switch: ONE batch records the remote location, URL, size and checksum and deletes
   the local entries and index rows.

A crash before 3 commits leaves the local ledger in use and an orphan object, which the
next pass replaces (same name) or removes (the first pass over a topic after open, or
after a failed step, deletes every object named with this store's identity that no
remote ledger points to); a crash after it leaves the complete remote copy in use.

Before a pass writes, the prefix must be this store's (``__txnstream_owner.json``,
written at the first offload; see :meth:`OffloadStore.claim`): another store's claim
refuses the pass (:class:`OffloadPrefixClaimedError`, health ``degraded``) unless
``offload_takeover`` is set. Objects of other stores are never deleted.

The background pass runs every ``offload_check_interval`` seconds over topics whose
policy has ``after`` set; ``engine.offload(topic)`` offloads every eligible ledger now,
regardless of ``after``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from txnstream.ledger import (
    Catalog,
    InvalidArgumentError,
    LedgerInfo,
    OffloadNotConfiguredError,
    OffloadPrefixClaimedError,
    RemoteStorageError,
    TxnId,
    WriteBatch,
    now_ms,
    sidecar_url,
)
from txnstream.txn_buffer import Topic

from ._config import OffloadPolicy
from ._core import Core

log = logging.getLogger("txnstream.engine")


class Offloading:
    """The engine's tiered storage (a part of :class:`~txnstream.api.Engine`)."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._config = core.config
        self._refused: str | None = None
        """Why offloading is refused (the prefix belongs to another store), if it is."""

    def problem(self) -> str | None:
        """What is wrong with the remote tier (damaged objects, offloading refused), or
        None; health says ``degraded`` with it."""
        corrupt = list(self._core.remote.corrupt.values())
        if corrupt:
            more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
            return f"{corrupt[0]}{more}"
        return self._refused

    def _check_offload_configured(self) -> None:
        if self._core.remote.base_url is None:
            raise OffloadNotConfiguredError(
                "offloading needs an object store: open the engine with"
                " EngineConfig(offload_url=...) (serve --offload-url URL)"
            )

    async def set_offload(
        self, topic: str, *, after: float | None = None, min_local_ledgers: int = 1
    ) -> None:
        """Set ``topic``'s offload policy: with ``after`` (seconds) the background pass
        offloads a ledger that stopped growing that long ago (None: only on
        :meth:`offload`); the newest ``min_local_ledgers`` ledgers (the open one
        included) stay local.

        Raises :class:`OffloadNotConfiguredError` without ``offload_url``.
        """
        owner = self._core.topic(topic)
        try:
            policy = OffloadPolicy(after, min_local_ledgers)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from None
        self._check_offload_configured()
        rt = self._core.rt
        batch = WriteBatch()
        Catalog.prepare_offload_policy(batch, owner.topic_id, policy.encode())
        await rt.store.write(batch)
        if not owner.deleted:
            rt.offload[topic] = policy

    async def offload(self, topic: str) -> list[int]:
        """Offload every eligible ledger of ``topic`` now (sealed, entirely at or below
        the stable position, older than the newest ``min_local_ledgers`` of its policy);
        returns their ids, oldest first.

        Raises :class:`OffloadNotConfiguredError` without ``offload_url`` and
        :class:`RemoteStorageError` if the object store fails (what was offloaded
        before the failure stays offloaded; the rest stays local).
        """
        owner = self._core.topic(topic)
        self._check_offload_configured()
        return await self._offload_topic(owner, manual=True)

    async def list_ledgers(self, topic: str) -> list[dict[str, Any]]:
        """``topic``'s ledgers, oldest first, as the HTTP listing shows them:
        ``{"ledger", "entries", "bytes", "has_aborts", "location", "url"}``."""
        owner = self._core.topic(topic)
        return [_ledger_json(info) for info in owner.ledger.ledgers]

    # -- the pass ------------------------------------------------------------------

    async def offload_loop(self) -> None:
        """The background pass: topics whose policy has ``after`` set."""
        while True:
            await asyncio.sleep(self._config.offload_check_interval)
            for name, policy in list(self._core.rt.offload.items()):
                topic = self._core.rt.topics.get(name)
                if topic is None or policy.after is None:
                    continue
                try:
                    await self._offload_topic(topic, manual=False)
                except OffloadPrefixClaimedError:
                    break  # said once by _claim_prefix; health says it until resolved
                except RemoteStorageError as exc:
                    log.warning("topic %s: offload failed, will retry: %s", name, exc)

    async def _offload_topic(self, topic: Topic, *, manual: bool) -> list[int]:
        """Offload the ledgers eligible when called, oldest first (not those that become
        eligible meanwhile: a pass ends even under a steady stream of writes)."""
        done: list[int] = []
        async with self._core.tier_lock:
            if topic.deleted:
                return done
            await self._sweep(topic)
            wanted_ids = [info.ledger_id for info in self._candidates(topic, manual=manual)]
            if wanted_ids:
                await self._claim_prefix()
            for wanted in wanted_ids:
                still = self._candidates(topic, manual=manual)
                if not still or still[0].ledger_id != wanted:
                    break  # trimmed, or no longer eligible
                info = still[0]
                try:
                    offloaded = await self._offload_ledger(topic, info)
                except (RemoteStorageError, OSError) as exc:
                    self._core.rt.swept.discard(topic.topic_id)  # look for orphans again
                    if isinstance(exc, RemoteStorageError):
                        raise
                    raise RemoteStorageError(
                        f"offloading ledger {info.ledger_id} of topic {topic.name!r} failed: {exc}"
                    ) from exc
                if not offloaded:
                    break
                done.append(info.ledger_id)
        return done

    def _candidates(self, topic: Topic, *, manual: bool) -> list[LedgerInfo]:
        """The ledgers the policy lets go now, oldest first (a manual run ignores the
        age rule)."""
        policy = self._core.rt.offload.get(topic.name) or OffloadPolicy()
        candidates = topic.ledger.offload_candidates(
            topic.buffer.max_read_position, policy.min_local_ledgers
        )
        if manual or not candidates:
            return candidates
        if policy.after is None:
            return []
        cutoff = now_ms() - policy.after * 1000
        ledgers = topic.ledger.ledgers
        out = []
        for info in candidates:
            # age counts from when it stopped growing: the next ledger's creation
            following = next((i for i in ledgers if i.ledger_id > info.ledger_id), None)
            if following is None or following.created_ms > cutoff:
                break
            out.append(info)
        return out

    async def _offload_ledger(self, topic: Topic, info: LedgerInfo) -> bool:
        """Upload, verify and switch one ledger; False if it may no longer go."""
        ledger = topic.ledger
        ledger_id = info.ledger_id
        rows = await ledger.export_rows(ledger_id)
        if len(rows) != info.entries:
            raise RemoteStorageError(
                f"ledger {ledger_id} of topic {topic.name!r} holds {len(rows)} entries,"
                f" {info.entries} expected; not offloaded"
            )
        index = await ledger.aborted_index(ledger_id) if info.has_aborts else []
        txns = await asyncio.to_thread(_data_txns, rows)  # a pass over every row: off the loop
        aborted = {seq for seq in txns if topic.buffer.is_aborted(TxnId(seq))}
        remote = self._core.remote
        obj = await asyncio.to_thread(
            remote.write_ledger, topic.name, ledger_id, rows, aborted, index
        )
        # the awaits above let anything happen: switch only what is still as it was
        current = next((i for i in ledger.ledgers if i.ledger_id == ledger_id), None)
        if topic.deleted or current is not info or info.is_remote:
            await self._core.delete_objects([obj.url])
            return False
        batch = WriteBatch()
        ledger.prepare_offload(batch, ledger_id, obj)
        await self._core.rt.store.write(batch)
        log.info(
            "topic %s: ledger %d offloaded to %s (%d bytes)",
            topic.name,
            ledger_id,
            obj.url,
            obj.size,
        )
        return True

    async def _claim_prefix(self) -> None:
        """Before a pass writes: the prefix must be this store's (its marker object, made
        at the first offload); another store's claim refuses the pass, unless
        ``offload_takeover`` is set (see :meth:`OffloadStore.claim`)."""
        remote = self._core.remote
        details = {"data_dir": str(self._core.path.resolve())}
        try:
            previous = await asyncio.to_thread(
                remote.claim, takeover=self._config.offload_takeover, details=details
            )
        except OffloadPrefixClaimedError as exc:
            if self._refused != str(exc):
                log.error("offloading refused: %s", exc)
            self._refused = str(exc)
            raise
        except OSError as exc:
            raise RemoteStorageError(f"cannot claim the offload prefix: {exc}") from exc
        if self._refused is not None:
            log.info("offloading resumed: the prefix %s is this store's", remote.base_url)
        self._refused = None
        if previous is not None:
            log.warning(
                "offload prefix %s taken over from store %s (offload_takeover): its objects"
                " stay, and it offloads there no more",
                remote.base_url,
                previous,
            )

    async def _sweep(self, topic: Topic) -> None:
        """Once per topic per open (and after a failure): delete the objects under the
        topic's prefix that carry this store's identity and that no remote ledger points
        to (left by an interrupted offload). Objects of other stores, or named before
        identities existed, are never touched."""
        swept = self._core.rt.swept
        if topic.topic_id in swept:
            return
        remote = self._core.remote
        keep = {info.url for info in topic.ledger.offloaded if info.url is not None}
        sidecars = {
            sidecar_url(info.url) for info in topic.ledger.offloaded if info.url and info.has_aborts
        }

        def sweep() -> list[str]:
            gone = []
            mine = remote.owner
            for url in remote.list_topic(topic.name):
                if mine is None or remote.owner_of(url) != mine:
                    continue
                if url not in keep and url not in sidecars:
                    remote.delete_url(url)
                    gone.append(url)
            return gone

        try:
            gone = await asyncio.to_thread(sweep)
        except OSError as exc:
            raise RemoteStorageError(f"cannot list the object store: {exc}") from exc
        if gone:
            log.warning("topic %s: removed %d orphan object(s)", topic.name, len(gone))
        swept.add(topic.topic_id)


def _data_txns(rows: list[Any]) -> set[int]:
    """The transactions with data among a ledger's rows."""
    return {txn for _, kind, txn, _ in rows if kind == 0 and txn is not None}


def _ledger_json(info: LedgerInfo) -> dict[str, Any]:
    return {
        "ledger": info.ledger_id,
        "entries": info.entries,
        "bytes": info.bytes,
        "has_aborts": info.has_aborts,
        "location": info.location,
        "url": info.url,
    }
