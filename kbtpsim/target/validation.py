"""Request validation (draft, "Operations"): the checks, in the documented order.

The order is the table in :mod:`kbtpsim.target.processor`'s docstring; each check raises
an error of :mod:`kbtpsim.errors` that carries its Status, and none changes any state, so
a failed request has no effect but its completion.
"""

from __future__ import annotations

from kbtpsim.errors import (
    AlreadyBound,
    InvalidHandle,
    Malformed,
    NoSpace,
    NotSealed,
    NotValid,
    Sealed,
    StaleGeneration,
    TicketAbandoned,
    TooLarge,
)
from kbtpsim.target.config import TargetConfig
from kbtpsim.target.ring import Ticket
from kbtpsim.target.session import InitiatorState
from kbtpsim.target.table import BlockTable
from kbtpsim.wire import (
    AllocStore,
    Bind,
    Feature,
    Free,
    GoodbyeFlag,
    Load,
    Message,
    Opcode,
    RequestFlag,
    Store,
    TableEntry,
)

#: Flag bits defined per opcode (decision D5: any other bit is MALFORMED).
DEFINED_FLAGS: dict[Opcode, int] = {
    Opcode.LOAD: 0x1F,
    Opcode.STORE: 0x1F,
    Opcode.ALLOC_STORE: 0x1F,
    Opcode.FREE: 0x1F,
    Opcode.BIND: 0,
    Opcode.HELLO: 0,
    Opcode.GOODBYE: int(GoodbyeFlag.RELEASE),
}


class Validation:
    """The ``_check_*`` methods of :class:`~kbtpsim.target.processor.Target`.

    Each returns the request's table entry or raises; none has a side effect.
    """

    config: TargetConfig
    table: BlockTable
    _readable: dict[str, list[range]]

    def _check_common(self, sess: InitiatorState, msg: Message, own: bool) -> TableEntry:
        """Steps 1-2: MALFORMED, then INVALID_HANDLE."""
        if msg.status:
            raise Malformed("Status must be zero in requests")
        if int(msg.flags) & ~DEFINED_FLAGS[msg.opcode]:
            raise Malformed(f"undefined flag bits 0x{int(msg.flags):04x}")
        if msg.flags & RequestFlag.RECORD and not sess.features & Feature.RECORD_COMPLETION:
            raise Malformed("RECORD without RECORD_COMPLETION")
        if own:
            if not sess.config.owns(msg.handle):
                raise InvalidHandle(f"0x{msg.handle:x} is not in {sess.name}'s range")
        elif not any(msg.handle in r for r in self._readable[sess.name]):
            raise InvalidHandle(f"{sess.name} may not read 0x{msg.handle:x}")
        return self.table.get(msg.handle)

    def _check_lengths(self, msg: Store | AllocStore) -> None:
        """Step 3 for stores."""
        length = msg.data_descriptor.length
        if length > self.config.block_size:
            raise TooLarge(f"{length} octets > Block Size {self.config.block_size}")
        if msg.inline_data is not None and length > self.config.max_inline:
            raise TooLarge(f"{length} inline octets > Max Inline {self.config.max_inline}")

    @staticmethod
    def _check_generation(msg: Message, entry: TableEntry) -> None:
        """Step 5."""
        if msg.generation and msg.generation != entry.generation:
            raise StaleGeneration(f"expected {msg.generation}, entry has {entry.generation}")

    def _check_load(self, sess: InitiatorState, msg: Message) -> TableEntry:
        assert isinstance(msg, Load)
        entry = self._check_common(sess, msg, own=False)
        if not entry.valid:
            raise NotValid()
        self._check_generation(msg, entry)
        if not entry.sealed and not msg.flags & RequestFlag.ALLOW_UNSEALED:
            raise NotSealed()
        if entry.data_length > msg.data_descriptor.length:
            raise TooLarge("Data Length exceeds the Data Descriptor")
        return entry

    def _check_store(self, sess: InitiatorState, msg: Message) -> TableEntry:
        assert isinstance(msg, Store)
        entry = self._check_common(sess, msg, own=True)
        self._check_lengths(msg)
        if not entry.valid:
            raise NotValid()
        self._check_generation(msg, entry)
        if entry.sealed:
            raise Sealed()
        return entry

    def _check_alloc_store(self, sess: InitiatorState, msg: Message) -> TableEntry:
        assert isinstance(msg, AllocStore)
        entry = self._check_common(sess, msg, own=True)
        self._check_lengths(msg)
        if entry.valid:
            raise AlreadyBound()
        self._check_generation(msg, entry)
        if sess.usage + 1 > sess.config.quota:
            raise NoSpace(f"{sess.name} uses {sess.usage} of quota {sess.config.quota}")
        return entry

    def _check_free(self, sess: InitiatorState, msg: Message) -> TableEntry:
        assert isinstance(msg, Free)
        entry = self._check_common(sess, msg, own=True)
        if not entry.valid:
            raise NotValid()
        self._check_generation(msg, entry)
        return entry

    def _check_bind(self, sess: InitiatorState, msg: Message) -> TableEntry:
        assert isinstance(msg, Bind)
        direct = sess.direct
        if direct is None or not sess.features & Feature.DIRECT_ALLOC:
            raise Malformed("BIND without DIRECT_ALLOC")
        entry = self._check_common(sess, msg, own=True)
        if msg.data_length > self.config.block_size:
            raise TooLarge("Data Length exceeds Block Size")
        if entry.valid:
            raise AlreadyBound()
        self._check_generation(msg, entry)
        if msg.ticket in direct.abandoned:
            raise TicketAbandoned(f"ticket {msg.ticket} was reclaimed")
        slot_offset = direct.ring.slot_offset_of(msg.ticket)
        if (msg.ticket not in direct.outstanding
                or direct.ring.ready(Ticket(msg.ticket, slot_offset)) != msg.block_offset):
            raise Malformed(f"ticket {msg.ticket}'s slot does not hold 0x{msg.block_offset:x}")
        if sess.usage > sess.config.quota:
            raise NoSpace(f"{sess.name} uses {sess.usage} of quota {sess.config.quota}")
        return entry
