"""One-sided accesses of the direct modes (draft, "Direct Modes"), as the target's NIC
carries them out: the initiator's FetchAdd on its Head, RDMA Reads of the table, the pool
and its ring, and RDMA Writes into its partition. Each checks the STag and bounds and
raises :class:`RemoteAccessError` (an RDMA access error) when they do not allow it.
"""

from __future__ import annotations

from kbtpsim.target.config import TargetConfig
from kbtpsim.target.pool import Pool
from kbtpsim.target.session import Connection, ConnState, InitiatorState
from kbtpsim.target.table import BlockTable
from kbtpsim.wire import Feature
from kbtpsim.wire.constants import RING_SLOT_SIZE, TABLE_ENTRY_SIZE

#: STags of the target's own memory exposed by direct modes.
TABLE_STAG = 0x0000_7AB1
POOL_STAG = 0x0000_B001
RING_STAG_BASE = 0x0100_0000  # | initiator index << 8 | 1 (ring) or 2 (head)
PARTITION_STAG_BASE = 0x0200_0000  # + a fresh number per session


class RemoteAccessError(Exception):
    """A one-sided access of an initiator that the target's STags do not allow.

    On a real NIC this is an RDMA access error that terminates the connection.
    """


class DirectAccess:
    """The ``remote_*`` methods of :class:`~kbtpsim.target.processor.Target`."""

    config: TargetConfig
    table: BlockTable
    pool: Pool
    initiators: dict[str, InitiatorState]

    def _conn(self, connection_id: int) -> Connection:
        raise NotImplementedError

    def remote_fetch_add(self, connection_id: int, stag: int, tagged_offset: int,
                         now: int) -> int:
        """The initiator's FetchAdd on its Head (DIRECT_ALLOC): the old counter word."""
        sess = self._direct_session(connection_id)
        direct = sess.direct
        assert direct is not None
        if stag != direct.head_stag or tagged_offset != 0:
            raise RemoteAccessError(f"FetchAdd outside the Head (STag 0x{stag:x})")
        old = direct.ring.head
        got = direct.ring.take_ticket()
        self._ticket_taken(sess, got.ticket, now)
        return old

    def ticket_taken(self, initiator: str, ticket: int, now: int) -> None:
        """A DIRECT_ALLOC FetchAdd that the target's NIC performed on the initiator's Head
        in memory (a memory-backed target: the Head has already advanced). Record
        ``ticket`` as outstanding since ``now``, which starts its Ticket Timeout, and
        count it in the initiator's usage: what :meth:`remote_fetch_add` does after its
        own FetchAdd. A ticket noticed after its session ended stays outstanding until
        its timeout reclaims it."""
        sess = self.initiators.get(initiator)
        if sess is None or sess.direct is None:
            raise ValueError(f"{initiator!r} has no DIRECT_ALLOC ring")
        self._ticket_taken(sess, ticket, now)

    def _ticket_taken(self, sess: InitiatorState, ticket: int, now: int) -> None:
        direct = sess.direct
        assert direct is not None
        direct.outstanding[ticket] = now
        sess.tickets += 1
        if sess.usage > sess.config.quota:
            sess.overdrawn = True

    def remote_read(self, connection_id: int, stag: int, tagged_offset: int,
                    length: int) -> bytes:
        """An initiator's RDMA Read of target memory (table, pool, its ring)."""
        conn = self._conn(connection_id)
        sess = conn.initiator
        if sess is None or conn.state is not ConnState.ESTABLISHED:
            raise RemoteAccessError("no session")
        le = conn.addr_le
        if stag in (TABLE_STAG, POOL_STAG) and sess.features & Feature.DIRECT_LOAD:
            if stag == POOL_STAG:
                return self._read_pool(tagged_offset, length)
            if tagged_offset % TABLE_ENTRY_SIZE or length % TABLE_ENTRY_SIZE or length <= 0:
                raise RemoteAccessError("table reads must be whole entries")
            first = self.table.base + tagged_offset // TABLE_ENTRY_SIZE
            count = length // TABLE_ENTRY_SIZE
            if tagged_offset < 0 or first + count > self.table.base + self.table.count:
                raise RemoteAccessError("table read out of bounds")
            return b"".join(self.table.encode_entry(h, le) for h in range(first, first + count))
        direct = sess.direct
        if sess.direct_alloc_enabled and direct is not None and stag == direct.ring_stag:
            if tagged_offset % RING_SLOT_SIZE or length != RING_SLOT_SIZE:
                raise RemoteAccessError("ring reads must be one whole slot")
            if not 0 <= tagged_offset < RING_SLOT_SIZE * direct.ring.n_slots:
                raise RemoteAccessError("ring read out of bounds")
            return direct.ring.slot(tagged_offset).encode(le)
        raise RemoteAccessError(f"STag 0x{stag:x} not readable by {sess.name}")

    def remote_write(self, connection_id: int, stag: int, tagged_offset: int,
                     data: bytes) -> None:
        """An initiator's RDMA Write into its DIRECT_ALLOC partition."""
        sess = self._direct_session(connection_id)
        direct = sess.direct
        assert direct is not None
        if stag != direct.partition_stag:
            raise RemoteAccessError(f"STag 0x{stag:x} is not a valid Partition STag")
        bs = self.config.block_size
        part = direct.partition
        if tagged_offset < part.start or tagged_offset + len(data) > part.start + len(part) * bs:
            raise RemoteAccessError("write outside the partition")
        block = part.start + (tagged_offset - part.start) // bs * bs
        if tagged_offset + len(data) > block + bs:
            raise RemoteAccessError("write crosses a block boundary")
        self.pool.write(block, bytes(data), tagged_offset - block)

    def _direct_session(self, connection_id: int) -> InitiatorState:
        conn = self._conn(connection_id)
        sess = conn.initiator
        if sess is None or not sess.direct_alloc_enabled:
            raise RemoteAccessError("DIRECT_ALLOC is not enabled on this connection")
        return sess

    def _read_pool(self, tagged_offset: int, length: int) -> bytes:
        bs = self.config.block_size
        start = self.pool.offsets.start
        end = self.pool.offsets.stop
        if length <= 0 or tagged_offset < start or tagged_offset + length > end:
            raise RemoteAccessError("pool read out of bounds")
        block = start + (tagged_offset - start) // bs * bs
        if tagged_offset + length > block + bs:
            raise RemoteAccessError("pool read crosses a block boundary")
        return self.pool.read(block, length, tagged_offset - block)
