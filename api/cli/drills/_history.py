"""The crash drill's record of what happened, and the checks run over it at the end.

The workload records every message it sent, every transaction and its known outcome,
every delivery and ack (with a logical clock), and finally the read_committed log and
the server's view of the transactions; :func:`check_history` turns that into the list
of :class:`Check` results the report prints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from txnstream.api.support import TopicReplay


class Pos(NamedTuple):
    """A log position, ordered as the log is: ledger, then entry."""

    ledger: int
    entry: int

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}"


def parse_position(position: str) -> Pos:
    """``"L:E"`` as a comparable pair."""
    ledger, _, entry = position.partition(":")
    return Pos(int(ledger), int(entry))


def examples(items: list[str], n: int = 5) -> str:
    """The first ``n`` items, and how many there are in all when more."""
    shown = ", ".join(items[:n])
    return shown + (f", ... ({len(items)} in all)" if len(items) > n else "")


@dataclass(slots=True)
class Sent:
    """One message the drill produced (``order`` = (txn ordinal or sequence, index))."""

    id: str
    topic: str
    source: str
    order: tuple[int, int]
    txn: TxnRun | None = None
    committed: bool = False
    """For plain (idempotent) messages: the produce returned 200."""


@dataclass(slots=True)
class TxnRun:
    """One transaction of a transactional producer and what became of it."""

    key: str
    worker: int
    ordinal: int
    plan: str
    txn: str | None = None
    outcome: str = "abandoned"
    reason: str = ""
    messages: list[Sent] = field(default_factory=list)


@dataclass(slots=True)
class Delivery:
    topic: str
    session: str
    """The base URL of the server that delivered it: one per server start."""
    position: Pos
    id: str
    clock: int
    redelivery_count: int


class LogEntry(NamedTuple):
    """One data entry of the final read_committed fetch."""

    position: Pos
    id: str
    """The drill's message id (the value's ``id``)."""
    txn: str | None


class ServerTxn(NamedTuple):
    """A transaction as the server lists it at the end."""

    label: str | None
    state: str


@dataclass(frozen=True, slots=True)
class Failover:
    """One takeover of a multi-server drill: the active killed, a standby serving."""

    killed: str
    """The URL of the active that was killed."""
    active: str
    """The URL of the standby that took over."""
    seconds: float
    """From the kill to the first ``ok`` health of the new active."""


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(slots=True)
class History:
    """Everything the crash drill saw, filled in by the workload."""

    clock: int = 0
    kills: int = 0
    restart_seconds: list[float] = field(default_factory=list)
    stops: int = 0
    """SIGSTOP pauses of the server (each ended by SIGCONT)."""
    spells: list[str] = field(default_factory=list)
    """One line per disk-full spell: reserve or not, health while full, recovery time."""
    txns: list[TxnRun] = field(default_factory=list)
    messages: dict[str, Sent] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)
    """Message id -> clock of its first successful ack."""
    order_violations: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    idem_batches: int = 0
    idem_retries: int = 0
    idem_duplicates: int = 0
    begin_failures: int = 0
    still_open: list[str] = field(default_factory=list)
    backlog_left: dict[str, int] = field(default_factory=dict)
    failovers: list[Failover] = field(default_factory=list)
    """Multi-server drills: each kill of the active and the takeover that followed."""
    log_entries: dict[str, list[LogEntry]] = field(default_factory=dict)
    """Topic -> the data entries of the final read_committed fetch."""
    server_txns: dict[str, ServerTxn] = field(default_factory=dict)
    """Txn id -> label and state as the server lists them at the end."""

    def tick(self) -> int:
        """The next value of the logical clock ordering deliveries and acks."""
        self.clock += 1
        return self.clock

    def committed_count(self) -> int:
        """Messages known committed: a 200 produce, or a transaction whose commit returned 200."""
        return sum(1 for m in self.messages.values() if _must_arrive(m))


def _must_arrive(msg: Sent) -> bool:
    return msg.committed or (msg.txn is not None and msg.txn.outcome == "committed")


@dataclass(slots=True)
class _Facts:
    """The history indexed the way the checks look it up."""

    delivered: dict[str, list[Delivery]]
    """Message id -> its deliveries."""
    in_log: dict[str, list[LogEntry]]
    """Message id -> where the final fetch found it."""
    must: list[Sent]
    """Messages known committed: each must arrive."""
    never: list[Sent]
    """Transactional messages known not committed: none may arrive."""
    reused: list[str]
    """Transactions whose id the server lists under another label."""
    resolved: dict[str, str]
    """Key of an in-doubt commit -> its state as the server lists it."""

    @classmethod
    def of(cls, h: History) -> _Facts:
        delivered: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in h.deliveries:
            delivered[delivery.id].append(delivery)
        in_log: dict[str, list[LogEntry]] = defaultdict(list)
        for entries in h.log_entries.values():
            for entry in entries:
                in_log[entry.id].append(entry)
        reused: list[str] = []
        resolved: dict[str, str] = {}
        for run in h.txns:
            listed = h.server_txns.get(str(run.txn), ServerTxn(None, "unknown"))
            if listed.label is not None and listed.label != run.key:
                reused.append(f"{run.txn} (begun for {run.key}, {run.reason}; now {listed.label})")
            elif run.outcome == "unknown":
                resolved[run.key] = listed.state if listed.label == run.key else "not found"
        return cls(
            delivered,
            in_log,
            must=[m for m in h.messages.values() if _must_arrive(m)],
            never=[
                m
                for m in h.messages.values()
                if not _must_arrive(m) and m.txn is not None and m.txn.outcome != "unknown"
            ],
            reused=reused,
            resolved=resolved,
        )


def check_history(h: History, replay: list[TopicReplay]) -> list[Check]:
    """Every check of the crash drill, in report order."""
    facts = _Facts.of(h)
    return [
        *_committed_checks(facts),
        *_not_committed_checks(facts),
        _in_doubt_check(h, facts),
        _after_ack_check(h),
        _session_order_check(h),
        _log_order_check(h),
        _once_in_log_check(h, facts.in_log),
        Check(
            "transaction ids never reused",
            not facts.reused,
            f"reused: {examples(facts.reused)}"
            if facts.reused
            else f"{len(h.txns)} ids, labels match",
        ),
        Check(
            "every transaction decided at the end",
            not h.still_open,
            f"still open: {examples(h.still_open)}" if h.still_open else "none open",
        ),
        _drained_check(h),
        Check(
            "no unexpected HTTP responses",
            not h.unexpected,
            examples(h.unexpected, 3) if h.unexpected else "none",
        ),
        _replay_check(replay),
    ]


def _committed_checks(facts: _Facts) -> list[Check]:
    """Every message known committed was delivered and is in the final fetch."""
    must = facts.must
    lost = [m.id for m in must if m.id not in facts.delivered]
    missing = [m.id for m in must if m.id not in facts.in_log]
    return [
        Check(
            "committed messages delivered",
            not lost,
            f"{len(must)} committed, {len(lost)} never delivered: {examples(lost)}"
            if lost
            else f"{len(must)} committed, all delivered",
        ),
        Check(
            "committed messages in final read_committed fetch",
            not missing,
            f"missing: {examples(missing)}" if missing else f"all {len(must)} present",
        ),
    ]


def _not_committed_checks(facts: _Facts) -> list[Check]:
    """No message of an aborted or abandoned transaction was delivered or is visible."""
    never = facts.never
    leaked = [m.id for m in never if m.id in facts.delivered]
    visible = [m.id for m in never if m.id in facts.in_log]
    return [
        Check(
            "no aborted/abandoned message delivered",
            not leaked,
            f"delivered: {examples(leaked)}" if leaked else f"{len(never)} never delivered",
        ),
        Check(
            "no aborted/abandoned message in final fetch",
            not visible,
            f"present: {examples(visible)}" if visible else f"{len(never)} absent",
        ),
    ]


def _in_doubt_check(h: History, facts: _Facts) -> Check:
    """A commit whose answer died with the server: all of it or none, as the server says."""
    torn: list[str] = []
    unknown_txns = [t for t in h.txns if t.outcome == "unknown"]
    for run in unknown_txns:
        present = sum(1 for m in run.messages if m.id in facts.in_log)
        state = facts.resolved.get(run.key, "unknown")
        expected = {"committed": len(run.messages)}.get(state, 0)
        if present not in (0, len(run.messages)) or (
            state in ("committed", "aborted", "not found") and present != expected
        ):
            torn.append(f"{run.txn} ({state}, {present}/{len(run.messages)} present)")
    outcome_counts = Counter(facts.resolved.values())
    return Check(
        "in-doubt commits all-or-nothing, as the server decided",
        not torn,
        f"torn: {examples(torn)}"
        if torn
        else f"{len(unknown_txns)} in doubt: "
        + (", ".join(f"{n} {s}" for s, n in sorted(outcome_counts.items())) or "none"),
    )


def _after_ack_check(h: History) -> Check:
    """Once an ack returned, its message is never delivered again."""
    after_ack = [
        f"{d.id}@{d.position}" for d in h.deliveries if d.id in h.acked and d.clock > h.acked[d.id]
    ]
    return Check(
        "no delivery after a successful ack",
        not after_ack,
        f"redelivered after ack: {examples(after_ack)}" if after_ack else "none",
    )


def _session_order_check(h: History) -> Check:
    return Check(
        "delivery order within each consumer session",
        not h.order_violations,
        examples(h.order_violations) if h.order_violations else "positions increase",
    )


def _log_order_check(h: History) -> Check:
    """Each producer's messages appear in the log in the order it sent them."""
    out_of_order: list[str] = []
    for topic, entries in h.log_entries.items():
        last_by_source: dict[str, Sent] = {}
        for entry in entries:
            sent = h.messages.get(entry.id)
            if sent is None:
                continue
            previous = last_by_source.get(sent.source)
            if previous is not None and sent.order <= previous.order:
                out_of_order.append(f"{topic}: {entry.id} after {previous.id}")
            last_by_source[sent.source] = sent
    return Check(
        "per-producer commit order in the log",
        not out_of_order,
        examples(out_of_order) if out_of_order else "kept",
    )


def _once_in_log_check(h: History, in_log: dict[str, list[LogEntry]]) -> Check:
    """No message twice, none unknown, and each delivered at the position it holds."""
    twice = sorted(msg_id for msg_id, where in in_log.items() if len(where) > 1)
    foreign = sorted(msg_id for msg_id in in_log if msg_id not in h.messages)
    mismatched = [
        f"{d.id}@{d.position}"
        for d in h.deliveries
        if d.id in in_log and d.position not in {e.position for e in in_log[d.id]}
    ]
    problems = [f"twice: {examples(twice)}"] if twice else []
    problems += [f"unknown ids: {examples(foreign)}"] if foreign else []
    problems += [f"delivered at another position: {examples(mismatched)}"] if mismatched else []
    return Check(
        "each message once in the log, where it was delivered",
        not problems,
        "; ".join(problems)
        or f"{sum(len(v) for v in h.log_entries.values())} entries, no duplicates",
    )


def _drained_check(h: History) -> Check:
    backlog = {t: n for t, n in h.backlog_left.items() if n}
    drained = bool(h.backlog_left) and not backlog
    return Check(
        "consumers drained (backlog 0)",
        drained,
        "all topics" if drained else f"backlog left: {backlog or 'unknown'}",
    )


def _replay_check(replay: list[TopicReplay]) -> Check:
    unequal = [r.topic for r in replay if not r.equal]
    return Check(
        "snapshot recovery equals full replay (after the run)",
        bool(replay) and not unequal,
        f"differs: {examples(unequal)}"
        if unequal
        else f"{len(replay)} topic(s), {sum(r.from_snapshot for r in replay)} from a snapshot",
    )
