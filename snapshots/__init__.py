"""Transaction-buffer snapshots and recovery by snapshot plus tail replay."""

from ._model import FORMAT_VERSION, SEGMENT_SIZE, SegmentRef, TxnBufferSnapshot
from ._replay import RecoveryInfo, full_replay, recover, replay
from ._store import (
    SnapshotState,
    has_unsealed_segments,
    is_due,
    prepare_delete_topic,
    prepare_snapshot,
    recover_topic,
    take_snapshot,
)

__all__ = [
    "FORMAT_VERSION",
    "RecoveryInfo",
    "SEGMENT_SIZE",
    "SegmentRef",
    "SnapshotState",
    "TxnBufferSnapshot",
    "full_replay",
    "has_unsealed_segments",
    "is_due",
    "prepare_delete_topic",
    "prepare_snapshot",
    "recover",
    "recover_topic",
    "replay",
    "take_snapshot",
]
