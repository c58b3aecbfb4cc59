"""From a chain's WR templates to the work requests one credit posts: where each named
location is (:meth:`WrResolution._loc`), what each field's source resolves to, and the
:class:`~kbtpsim.nic.WorkRequest` of a template (:meth:`WrResolution._build`). The half
of :class:`~kbtpsim.chains.post.ChainServer` that knows the IR's sources; the server
provides the queues, buffers and keys."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kbtpsim.chains.compiler import RCQE
from kbtpsim.chains.ir import Addr, Const, CtrlWord, Placed, WrTemplate
from kbtpsim.chains.lowering import CCQE, STAGING
from kbtpsim.nic import (
    CompletionQueue,
    Condition,
    MemoryRegion,
    Nic,
    QueuePair,
    Sge,
    WorkRequest,
    WqeFlags,
    field_layout,
)
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.wqe import Opcode, ctrl_word, encode_wqe

if TYPE_CHECKING:
    from kbtpsim.chains.layout import RingKeys

#: ``buf:NAME[+n]`` / ``wqe:WR.FIELD[+n]``; a WR added by the CAS-on-WQE lowering is named
#: after the one it arms (``X.cas``, ``X.cas2``)
_LOC = re.compile(r"^(buf|wqe):([A-Za-z0-9_]+(?:\.cas\w*)?)(?:\.([A-Za-z0-9_.]+?))?"
                  r"(?:\+(\d+))?$")
ROLE_BITS = 16


@functools.cache
def _parse_loc(loc: str) -> tuple[str, str, str | None, int]:
    """``loc`` as (kind, name, field, offset): a pure function of the string, memoised
    (a credit's chain resolves the same few hundred locations every round)."""
    m = _LOC.match(loc)
    if m is None:
        raise ValueError(f"bad location {loc!r}")
    return m.group(1), m.group(2), m.group(3), int(m.group(4) or 0)


COMMIT_TAG = 0xC000
#: ``wr_id`` bit of the CPU's work requests written into a credit's CPU slots
CPU_WR = 1 << 62


@dataclass
class _Credit:
    number: int
    bufs: dict[str, int]
    index: dict[str, tuple[QueuePair, int]] = field(default_factory=dict)
    seen: int = 0
    #: CQEs of this credit generated so far (seen: polled so far)
    pushed: int = 0
    served: str | None = None
    recv_len: int | None = None
    alloc_armed: bool = False  #: the CPU allowed an ALLOC_STORE in this credit (quota)
    ticket_taken: bool = False  #: the FetchAdd on Head (Tail: a FREE) completed
    ticket_time: int | None = None  #: CQE time of that FetchAdd
    #: CQE time of that FetchAdd completed in error (flushed with the connection): it
    #: may have taken its Ticket or not, which only its result buffer tells
    ticket_error_time: int | None = None
    unbound_time: int | None = None  #: CQE time of a FREE's unbind (decision C20)
    bound_time: int | None = None  #: when an ALLOC_STORE's Generation add landed
    last_time: int | None = None  #: latest CQE time of the credit's chain
    early: bool = False  #: the CPU took the request before its chain ended (take_early)
    entry_read_time: int | None = None  #: when the table-entry Read sampled the entry
    entry_write_time: int | None = None  #: CQE time of a STORE's table-entry Write
    commit_time: int | None = None  #: CQE time of the variant's commit Write
    #: CQE time of a Read-source request's data Read from the initiator (SUCCESS)
    data_read_time: int | None = None
    #: the variant whose COMPLETION Send went out (a successful SEND CQE), and when
    sent: tuple[str, int] | None = None
    #: chains v2 with dispatch: the variant the request was dispatched to (None: none),
    #: False until known (:meth:`kbtpsim.chains.v2.slots.SlotQueues.dispatched_variant`)
    dispatched: str | bool | None = False
    #: chains v2: positions in the connection QP's ring of this credit's connection-WR
    #: CQEs seen (:meth:`kbtpsim.chains.v2.slots.SlotQueues._after_finish`)
    conn_seen: list[int] = field(default_factory=list)
    #: chains v2 with dispatch: CQEs of its variant's advancer seen (C27: a credit is
    #: reported before them; its slot is granted again after them)
    adv_seen: int = 0


class WrResolution:
    """Template -> work request, for one credit (mixed into ChainServer)."""

    nic: Nic
    consts: dict[str, int]
    scratch: MemoryRegion
    staging: MemoryRegion
    rcq_mr: MemoryRegion
    ccq_mr: MemoryRegion  #: the connection QP's CQ buffer (chains v2 that test its CQEs)
    pool_key: MemoryRegion
    table_key: MemoryRegion | None
    ring: RingKeys | None
    #: the LOADs' reader counts (decision C20), None without a NIC FREE
    readers_key: MemoryRegion | None
    recv_cq: CompletionQueue
    chain_cq: CompletionQueue
    gate_cq: CompletionQueue
    per_credit_cqes: int
    patched: dict[tuple[str, str], list[tuple[int, int]]]
    _shapes: dict[str, WorkRequest]
    _position: dict[str, int]
    _fixed_of: dict[str, tuple[WqeFlags, int]]  #: :meth:`_fixed`, by template name

    if TYPE_CHECKING:
        def _queue(self, name: str, number: int = 0) -> QueuePair: ...

    def _loc(self, cr: _Credit, loc: str) -> tuple[int, int]:
        """(address, key) of ``buf:NAME[+n]`` / ``wqe:WR.FIELD[+n]``."""
        kind, name, fld, off = _parse_loc(loc)
        if kind == "buf":
            if name in self.consts:
                return self.consts[name] + off, self.scratch.lkey
            if name == RCQE:  # this credit's receive CQE in the receive CQ's buffer
                return self.recv_cq.slot_addr(cr.number) + off, self.rcq_mr.lkey
            if name.startswith(CCQE + "_"):  # a connection WR's CQE (decision C24)
                return self._conn_cqe_addr(cr, name[len(CCQE) + 1:]) + off, \
                    self.ccq_mr.lkey
            key = self.staging.lkey if name in STAGING else self.scratch.lkey
            return cr.bufs[name] + off, key
        qp, idx = cr.index[name]
        wr = self._shapes[name]
        return qp.wqe_addr(idx) + field_layout(wr)[fld][0] + off, qp.sq_mr.lkey

    def _conn_cqe_addr(self, cr: _Credit, wr: str) -> int:
        """Where credit ``cr``'s connection WR ``wr`` writes its CQE in the connection
        QP's CQ buffer (decision C24): only chains whose connection QP has a CQ of its own,
        with a buffer (:class:`~kbtpsim.chains.v2.slots.SlotQueues`)."""
        raise ValueError(f"{wr}: a test of a connection WR's CQE needs chains v2 "
                         "(decision C24)")

    def _value(self, cr: _Credit, w: WrTemplate, src: object) -> int:
        if isinstance(src, Const):
            return int.from_bytes(src.value, "big") if isinstance(src.value, bytes) \
                else src.value
        if isinstance(src, Placed):  # written at run time, over its initial value
            return 0 if src.init is None else self._value(cr, w, src.init)
        if isinstance(src, CtrlWord):  # the armed control word of a disarmed WR (RedN)
            qp, idx = cr.index[src.wr]
            prof = self.nic.profile
            raw = encode_wqe(replace(self._shapes[src.wr], armed=True),
                             prof.wqe_field_byte_order, index=idx, qpn=qp.qpn)
            return ctrl_word(raw, "big" if prof.atomic_byte_order == "big" else "little")
        assert isinstance(src, Addr)
        ref = src.ref
        if ref.startswith(("buf:", "wqe:")):
            return self._loc(cr, ref)[0] + src.offset
        if ref == "key:scratch":
            return self.scratch.rkey
        if ref == "key:table":
            if self.table_key is None:
                raise ValueError("the chain uses the table's strided key, which is missing")
            return self.table_key.rkey
        if ref == "key:pool":
            return self.pool_key.lkey
        if ref == "key:staging":
            return self.staging.lkey
        if ref == "key:readers":
            if self.readers_key is None:
                raise ValueError(f"{w.name}: the chain uses the reader counts, whose key "
                                 "is missing")
            return self.readers_key.rkey
        if ref in ("key:ring", "key:ring_head", "ring:head", "region:ring"):
            if self.ring is None:
                raise ValueError(f"{w.name}: the chain uses the ring, whose keys are missing")
            return {"key:ring": self.ring.slots.rkey, "key:ring_head": self.ring.head.rkey,
                    "ring:head": self.ring.head_to,
                    "region:ring": self.ring.slots.base_to}[ref]
        if ref in ("key:ring_tail", "ring:tail", "key:ring_bo", "region:ring_bo"):
            ring = self.ring
            if ring is None or ring.tail is None or ring.slots_bo is None:
                raise ValueError(f"{w.name}: the chain uses the ring's Tail, whose keys "
                                 "are missing")
            return {"key:ring_tail": ring.tail.rkey, "ring:tail": ring.tail_to,
                    "key:ring_bo": ring.slots_bo.rkey,
                    "region:ring_bo": ring.slots_bo.base_to}[ref]
        if ref.startswith("qp:"):
            return self._queue(ref[3:], cr.number).qpn
        if ref.startswith("wr:"):
            return cr.index[ref[3:]][1] + src.offset
        raise ValueError(f"{w.name}: cannot resolve {ref!r}")

    def _rkey_for(self, cr: _Credit, w: WrTemplate) -> int:
        src = w.fields.get("rkey")
        if isinstance(src, Addr) and src.ref == "key:rings":
            raddr = w.fields.get("raddr")
            dest = raddr.ref if isinstance(raddr, Addr) else w.places[0].dest
            m = _LOC.match(dest)
            name = m.group(2) if m else dest[4:].split(".")[0]
            return cr.index[name][0].sq_mr.rkey
        return self._value(cr, w, src) if src is not None else 0

    def _wait_count(self, cr: _Credit, w: WrTemplate) -> int:
        target = w.fields["target"]
        count = w.fields["count"]
        assert isinstance(target, Addr)
        if isinstance(count, Addr):
            return self._value(cr, w, count)
        assert isinstance(count, Const) and isinstance(count.value, int)
        per = {"cq:chain": self.per_credit_cqes, "cq:recv": 1, "cq:gate": 1}[target.ref]
        return cr.number * per + count.value

    def _fixed(self, w: WrTemplate) -> tuple[WqeFlags, int]:
        """What a template's WRs share in every credit: their flags and the low bits of
        their wr_id (built once per template: enum arithmetic is slow)."""
        fixed = self._fixed_of.get(w.name)
        if fixed is None:
            flags = (WqeFlags.SIGNALED if w.signaled else WqeFlags.NONE) | w.flags
            low = self._position[w.name]
            if w.name.startswith("commit_") and "." not in w.name:
                low |= COMMIT_TAG
            fixed = self._fixed_of[w.name] = (flags, low)
        return fixed

    def _build(self, cr: _Credit, w: WrTemplate, shape: bool) -> WorkRequest:
        op = w.opcode
        assert op is not None
        flags, low = self._fixed(w)
        kw: dict[str, object] = {"armed": not w.disarmed}  # disarmed: a CAS arms it
        if w.cond is not None:
            if shape:
                kw["cond"] = Condition(0, 0, 0, 0)
            else:
                if len(w.cond.compare) != 8 or len(w.cond.mask) != 8:
                    raise ValueError(f"{w.name}: a condition's compare and mask are 8 octets")
                addr, key = self._loc(cr, w.cond.word.loc)
                order: ByteOrder = "big" if self.nic.profile.atomic_byte_order == "big" \
                    else "little"
                kw["cond"] = Condition(addr, key, int.from_bytes(w.cond.compare, order),
                                       int.from_bytes(w.cond.mask, order))
        wr_id = cr.number << ROLE_BITS | low
        if op in (Opcode.WAIT, Opcode.ENABLE):
            if not shape:
                kw["target"] = self._target(w, cr.number)
                kw["count"] = self._wait_count(cr, w)
            return WorkRequest(op, flags=flags, wr_id=wr_id, **kw)  # type: ignore[arg-type]
        if op is Opcode.NOP:
            return WorkRequest(op, flags=flags, wr_id=wr_id, **kw)  # type: ignore[arg-type]
        sges: list[Sge] = []
        if "sge0.addr" in w.fields:
            count = w.fields["sge0.count"]
            assert isinstance(count, Const) and isinstance(count.value, int)
            sges.append(Sge(self._poisoned(w, "sge0.addr", 0), count.value,
                            self.pool_key.lkey))
        elif op in (Opcode.RDMA_READ, Opcode.MASKED_FETCH_ADD, Opcode.FETCH_ADD,
                    Opcode.MASKED_CAS, Opcode.CAS):
            for p in w.places:
                addr, key = (0, 0) if shape else self._loc(cr, f"{p.dest}+{p.offset}"
                                                            if p.offset else p.dest)
                sges.append(Sge(addr, p.length, key))
        elif w.inline is None:
            for rd in w.gather:
                addr, key = (0, 0) if shape else self._loc(cr, rd.loc)
                sges.append(Sge(addr, rd.length, key))
        if not shape:
            kw["remote_addr"] = self._poisoned(w, "raddr", self._value(
                cr, w, w.fields["raddr"])) if "raddr" in w.fields else 0
            kw["rkey"] = self._rkey_for(cr, w)
        if op in (Opcode.MASKED_FETCH_ADD, Opcode.FETCH_ADD):
            kw["swap_add"] = 0 if shape else self._value(cr, w, w.fields["swap_add"])
            if "add_mask" in w.fields:
                kw["swap_mask"] = 0 if shape else self._value(cr, w, w.fields["add_mask"])
        if op in (Opcode.MASKED_CAS, Opcode.CAS):  # CAS-on-WQE operands
            for k in ("swap_add", "compare", "swap_mask", "compare_mask"):
                if k in w.fields:
                    kw[k] = 0 if shape else self._value(cr, w, w.fields[k])
        return WorkRequest(op, tuple(sges), flags, inline_data=w.inline, wr_id=wr_id,
                           **kw)  # type: ignore[arg-type]

    def _poisoned(self, w: WrTemplate, fld: str, value: int) -> int:
        """``value`` with the octets patches write into ``w``'s address field ``fld`` set
        to all ones (:attr:`patched`; 8-octet address fields)."""
        ranges = self.patched.get((w.name, fld))
        if not ranges:
            return value
        order: ByteOrder = "big" if self.nic.profile.wqe_field_byte_order == "big" \
            else "little"
        raw = bytearray(value.to_bytes(8, order))
        for off, length in ranges:
            raw[off:off + length] = b"\xff" * len(raw[off:off + length])
        return int.from_bytes(raw, order)

    def _target(self, w: WrTemplate, number: int = 0) -> int:
        t = w.fields["target"]
        assert isinstance(t, Addr)
        kind, name = t.ref.split(":")
        if kind == "qp":
            return self._queue(name, number).qpn
        cq = {"chain": self.chain_cq, "recv": self.recv_cq, "gate": self.gate_cq}[name]
        return cq.cqn
