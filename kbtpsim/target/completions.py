"""How the software target answers (draft, "Completion"): a request's COMPLETION message,
or its completion record in initiator memory when the session has RECORD_COMPLETION, with
the entry fields :mod:`kbtpsim.target.processor`'s docstring describes; and the messages
the target builds itself (HELLO_ACK, the COMPLETION of an undecodable request).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.target.effects import SendMessage, WriteRecord
from kbtpsim.wire import Completion, CompletionRecord, Feature, RequestFlag, Status, encode

if TYPE_CHECKING:
    from kbtpsim.target.effects import Effect
    from kbtpsim.target.session import Connection, InitiatorState
    from kbtpsim.target.stats import OpCounters
    from kbtpsim.target.table import BlockTable
    from kbtpsim.wire import Message, TableEntry


class Completions:
    """Mixed into :class:`~kbtpsim.target.processor.Target`: every answer it sends, counted
    per operation and status."""

    table: BlockTable
    connections: dict[int, Connection]
    counters: OpCounters

    def _complete(self, conn_id: int, sess: InitiatorState | None, msg: Message,
                  status: Status, entry: TableEntry | None, out: list[Effect]) -> None:
        """Answer ``msg`` with ``status`` (COMPLETION message or completion record)."""
        if entry is not None:
            generation, length, offset = entry.generation, entry.data_length, entry.block_offset
        elif status in (Status.INVALID_HANDLE, Status.MALFORMED) or sess is None:
            generation, length, offset = 0, 0, 0
        else:
            generation, length, offset = self.table.get(msg.handle).generation, 0, 0
        conn = self.connections.get(conn_id)
        if conn is None:
            return  # the connection is gone: nobody to complete to
        op = msg.opcode.name
        cd = getattr(msg, "completion_descriptor", None)
        if (cd is not None and sess is not None and status is not Status.MALFORMED
                and sess.features & Feature.RECORD_COMPLETION):
            record = CompletionRecord(msg.request_id, status, generation, length, offset)
            out.append(WriteRecord(conn_id, cd.stag, cd.tagged_offset, record,
                                   record.encode(conn.addr_le)))
            self.counters.bump(op, status.name)
            return
        invalidate = None
        dd = getattr(msg, "data_descriptor", None)
        if (dd is not None and msg.flags & RequestFlag.INVALIDATE
                and not msg.flags & RequestFlag.INLINE):
            invalidate = dd.stag
        completion = Completion(
            request_id=msg.request_id, handle=msg.handle, generation=generation,
            status=status, data_length=length, block_offset=offset,
        )
        out.append(SendMessage(conn_id, completion, encode(completion, conn.addr_le),
                               invalidate))
        self.counters.bump(op, status.name)

    def _send(self, conn: Connection, msg: Message, invalidate: int | None,
              out: list[Effect], op: str) -> None:
        out.append(SendMessage(conn.connection_id, msg, encode(msg, conn.addr_le), invalidate))
        self.counters.bump(op, Status(msg.status).name)
