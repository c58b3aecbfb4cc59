"""The software KBTP target: the reference semantics of the draft's target-side rules.

Sans-IO (see :mod:`kbtpsim.target.processor`): bytes and ``now`` (integer picoseconds) in,
:mod:`kbtpsim.target.effects` out; :meth:`Target.next_deadline` / :meth:`Target.advance`
for ticket timeouts and retention.
"""

from kbtpsim.target.bytestore import ByteStore, SparseBytes
from kbtpsim.target.config import PS_PER_MS, Binding, CounterMode, InitiatorConfig, TargetConfig
from kbtpsim.target.direct import POOL_STAG, TABLE_STAG, RemoteAccessError
from kbtpsim.target.effects import (
    Effect,
    InvalidateStag,
    ReadInitiator,
    SendMessage,
    WriteInitiator,
    WriteRecord,
)
from kbtpsim.target.invariant import InvariantViolation
from kbtpsim.target.layout import RingLayout, TargetLayout
from kbtpsim.target.processor import Target
from kbtpsim.target.ring import FreeRing, SlotWrite, Ticket
from kbtpsim.target.stats import TargetStats
from kbtpsim.target.table import NEVER_BOUND, BlockTable, next_generation

__all__ = [
    "NEVER_BOUND",
    "POOL_STAG",
    "PS_PER_MS",
    "TABLE_STAG",
    "Binding",
    "BlockTable",
    "ByteStore",
    "CounterMode",
    "Effect",
    "FreeRing",
    "InitiatorConfig",
    "InvalidateStag",
    "InvariantViolation",
    "ReadInitiator",
    "RemoteAccessError",
    "RingLayout",
    "SendMessage",
    "SlotWrite",
    "SparseBytes",
    "Target",
    "TargetConfig",
    "TargetLayout",
    "TargetStats",
    "Ticket",
    "WriteInitiator",
    "WriteRecord",
    "next_generation",
]
