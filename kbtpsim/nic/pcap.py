"""Packet capture: every packet on the simulated wire as a RoCEv2 frame in a pcap file.

:class:`Capture` taps the links of one simpy environment (``kbtpsim.nic.network.TAPS``):
each packet a QP puts on a link (or a NIC's loopback path) is written as an Ethernet /
IPv4 / UDP 4791 / BTH frame (:mod:`kbtpsim.nic.roce`), stamped with the simulated time its
first octet leaves the port, in a nanosecond-resolution pcap (magic ``0xa1b23c4d``, link
type Ethernet). Time 0 of the file is time 0 of the simulation (1970-01-01 in a viewer).

The model's packets carry a per-QP message number, not PSNs; the capture keeps the RC
transport state a real NIC would: each requester QP numbers its request packets from PSN 0
(an RDMA Read takes as many PSNs as it has response packets), a response carries the PSN
of the request packet it answers (the last one of a message for an ACK or NAK; the Read
response packets count up from the request's PSN), and each responder counts completed
messages in the AETH's MSN. ACKs are coalesced (one per message, as the model sends them),
so AckReq is set on the last packet of each request message.

Ports are numbered in the order the NICs were created (``nics``), then as they first
appear: port ``n`` is 10.0.0.(n+1), MAC 02:00:0a:00:00:(n+1). Masked atomics (not in
the InfiniBand specification) are sent with the CmpSwap / FetchAdd opcodes: masked FetchAdd
carries its field-boundary mask in the Compare Data field; masked CmpSwap appends its swap
and compare masks (16 octets) after the AtomicETH.

Writing a frame costs nothing in simulated time: a capture never changes a result.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import simpy

from kbtpsim.nic import network
from kbtpsim.nic.errors import WcStatus
from kbtpsim.nic.packet import Packet, PktKind
from kbtpsim.nic.roce import (
    AETH_ACK,
    AETH_NAK,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_REMOTE_OPERATIONAL,
    BthOpcode,
    Endpoint,
    aeth,
    atomic_eth,
    bth,
    frame,
    pad_of,
    reth,
)
from kbtpsim.nic.wqe import Opcode

PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
SNAPLEN = 262144

_NAK_CODE = {WcStatus.REM_INV_REQ_ERR: NAK_INVALID_REQUEST,
             WcStatus.REM_ACCESS_ERR: NAK_REMOTE_ACCESS,
             WcStatus.REM_OP_ERR: NAK_REMOTE_OPERATIONAL}
_PSN = 0xFFFFFF


class PcapWriter:
    """A nanosecond pcap stream (libpcap format 2.4, Ethernet frames)."""

    __slots__ = ("fh", "frames", "snaplen")

    def __init__(self, fh: BinaryIO, snaplen: int = SNAPLEN) -> None:
        self.fh = fh
        self.snaplen = snaplen
        self.frames = 0
        fh.write(struct.pack("<IHHiIII", PCAP_MAGIC_NS, 2, 4, 0, 0, snaplen,
                             LINKTYPE_ETHERNET))

    def write(self, time_ns: int, data: bytes) -> None:
        sec, nsec = divmod(time_ns, 1_000_000_000)
        cut = data[: self.snaplen]
        self.fh.write(struct.pack("<IIII", sec, nsec, len(cut), len(data)))
        self.fh.write(cut)
        self.frames += 1


class _Message:
    """A request message in flight: its first PSN and its request and response packets."""

    __slots__ = ("first", "n_req", "n_resp")

    def __init__(self, first: int, n_req: int, n_resp: int) -> None:
        self.first = first
        self.n_req = n_req
        self.n_resp = n_resp


class Capture:
    """Writes every packet sent in ``env`` to ``path`` (see the module docstring).

    Use as a context manager, or :meth:`start` and :meth:`close`."""

    def __init__(self, env: simpy.Environment, path: str | Path,
                 nics: Iterable[str] = ()) -> None:
        self.env = env
        self.path = Path(path)
        self._ports: dict[str, Endpoint] = {}
        for name in nics:
            self._port(name)
        self._fh: BinaryIO | None = None
        self._out: PcapWriter | None = None
        self._heap: list[tuple[int, int, bytes]] = []
        self._order = 0
        self._next_psn: dict[Any, int] = {}  # requester QP -> next PSN
        self._msgs: dict[tuple[Any, int], _Message] = {}  # (requester QP, seq) -> message
        self._msn: dict[Any, int] = {}  # responder QP -> MSN
        self.frames = 0
        self.bytes = 0

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Capture:
        if self.env in network.TAPS:
            raise RuntimeError("this simulation is captured already")
        self._fh = self.path.open("wb")
        self._out = PcapWriter(self._fh)
        network.TAPS[self.env] = self.tap
        return self

    def close(self) -> None:
        """Stop tapping; write what is queued and close the file."""
        if network.TAPS.get(self.env) == self.tap:
            del network.TAPS[self.env]
        if self._out is not None:
            self._flush(None)
            assert self._fh is not None
            self._fh.close()
            self._out = self._fh = None

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the tap
    def tap(self, pkt: Packet, deliver: Callable[[Packet], None], start_ps: int) -> None:
        """``LinkDirection.send`` calls this for every packet (``start_ps``: the time its
        first octet goes on the wire, never before now)."""
        dst = getattr(deliver, "__self__", None)  # the receiving QP (QueuePair.deliver)
        src = getattr(dst, "peer", None)
        if dst is None or src is None:
            return
        data = self.encode(pkt, src, dst)
        self._order += 1
        heapq.heappush(self._heap, (start_ps, self._order, data))
        self._flush(int(self.env.now))

    def _flush(self, upto: int | None) -> None:
        """Write queued frames stamped at or before ``upto`` (all if None): a later packet
        never starts before now, so the file is in time order."""
        heap, out = self._heap, self._out
        assert out is not None
        while heap and (upto is None or heap[0][0] <= upto):
            t, _, data = heapq.heappop(heap)
            out.write(t // 1000, data)
            self.frames += 1
            self.bytes += len(data)

    def _port(self, nic: str) -> Endpoint:
        ep = self._ports.get(nic)
        if ep is None:
            ep = self._ports[nic] = Endpoint.numbered(len(self._ports))
        return ep

    def addresses(self) -> dict[str, str]:
        """NIC name -> IPv4 address, as written in the frames."""
        return {name: ".".join(str(b) for b in ep.ip) for name, ep in self._ports.items()}

    # ------------------------------------------------------------------ encoding
    def encode(self, pkt: Packet, src: Any, dst: Any) -> bytes:
        """The frame of ``pkt`` from QP ``src`` to QP ``dst`` (updates the PSN state)."""
        kind = pkt.kind
        if kind in (PktKind.SEND, PktKind.WRITE, PktKind.READ_REQ, PktKind.ATOMIC_REQ):
            psn, transport_ext, payload, opcode = self._request(pkt, src, dst)
            ack_req = pkt.last
        else:
            psn, transport_ext, payload, opcode = self._response(pkt, src, dst)
            ack_req = False
        head = bth(opcode, dst.qpn, psn, pad=pad_of(len(payload)), ack_req=ack_req)
        sport = 0xC000 | (src.qpn & 0x3FFF)  # flow entropy from the source QP (A17.4.4.2)
        return frame(self._port(src.nic.name), self._port(dst.nic.name), sport,
                     head + transport_ext, payload)

    def _request(self, pkt: Packet, src: Any, dst: Any) -> tuple[int, bytes, bytes, int]:
        psn = self._next_psn.get(src, 0)
        kind = pkt.kind
        if pkt.first:
            if kind is PktKind.SEND or kind is PktKind.WRITE:
                n_req = max(1, -(-pkt.total // src.nic.profile.mtu))
                n_resp = 1
            elif kind is PktKind.READ_REQ:
                n_req = 1
                n_resp = max(1, -(-pkt.total // dst.nic.profile.mtu))
            else:
                n_req = n_resp = 1
            self._msgs[(src, pkt.seq)] = _Message(psn, n_req, n_resp)
        step = self._msgs[(src, pkt.seq)].n_resp if kind is PktKind.READ_REQ else 1
        self._next_psn[src] = (psn + step) & _PSN
        payload = pkt.payload or b""
        ext = b""
        op = pkt.opcode
        if kind is PktKind.SEND:
            imm, inv = op == Opcode.SEND_WITH_IMM, op == Opcode.SEND_WITH_INVALIDATE
            if pkt.first and pkt.last:
                opcode = (BthOpcode.SEND_ONLY_WITH_IMMEDIATE if imm else
                          BthOpcode.SEND_ONLY_WITH_INVALIDATE if inv else BthOpcode.SEND_ONLY)
            elif pkt.last:
                opcode = (BthOpcode.SEND_LAST_WITH_IMMEDIATE if imm else
                          BthOpcode.SEND_LAST_WITH_INVALIDATE if inv else BthOpcode.SEND_LAST)
            else:
                opcode = BthOpcode.SEND_FIRST if pkt.first else BthOpcode.SEND_MIDDLE
            if pkt.last and (imm or inv):
                ext = struct.pack("!I", pkt.imm & 0xFFFFFFFF)  # ImmDt or IETH (R_Key)
        elif kind is PktKind.WRITE:
            imm = op == Opcode.RDMA_WRITE_WITH_IMM
            if pkt.first:
                ext = reth(pkt.raddr, pkt.rkey, pkt.total)
            if pkt.first and pkt.last:
                opcode = (BthOpcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE if imm
                          else BthOpcode.RDMA_WRITE_ONLY)
            elif pkt.last:
                opcode = (BthOpcode.RDMA_WRITE_LAST_WITH_IMMEDIATE if imm
                          else BthOpcode.RDMA_WRITE_LAST)
            else:
                opcode = BthOpcode.RDMA_WRITE_FIRST if pkt.first else BthOpcode.RDMA_WRITE_MIDDLE
            if pkt.last and imm:
                ext += struct.pack("!I", pkt.imm & 0xFFFFFFFF)
        elif kind is PktKind.READ_REQ:
            opcode = BthOpcode.RDMA_READ_REQUEST
            ext = reth(pkt.raddr, pkt.rkey, pkt.total)
            payload = b""
        else:  # ATOMIC_REQ; operands: swap/add, compare, swap mask, compare mask
            swap_add, compare, swap_mask, compare_mask = pkt.operands
            if op in (Opcode.CAS, Opcode.MASKED_CAS):
                opcode = BthOpcode.COMPARE_SWAP
            else:
                opcode = BthOpcode.FETCH_ADD
            if op == Opcode.MASKED_FETCH_ADD:
                compare = swap_mask  # the field-boundary mask
            ext = atomic_eth(pkt.raddr, pkt.rkey, swap_add, compare)
            if op == Opcode.MASKED_CAS:
                ext += struct.pack("!QQ", swap_mask & (2**64 - 1), compare_mask & (2**64 - 1))
            payload = b""
        return psn, ext, payload, int(opcode)

    def _response(self, pkt: Packet, src: Any, dst: Any) -> tuple[int, bytes, bytes, int]:
        # dst is the requester: the message is keyed by it
        key = (dst, pkt.seq)
        msg = self._msgs.get(key)
        first = msg.first if msg is not None else 0
        kind = pkt.kind
        payload = b""
        msn = self._msn.get(src, 0)
        if kind is PktKind.NAK:
            psn = first + (msg.n_req - 1 if msg is not None else 0)
            self._msgs.pop(key, None)
            code = _NAK_CODE.get(WcStatus(pkt.status), NAK_REMOTE_OPERATIONAL)
            return psn & _PSN, aeth(AETH_NAK | code, msn), payload, int(BthOpcode.ACKNOWLEDGE)
        if pkt.first:  # a new message completes at the responder
            msn = self._msn[src] = (msn + 1) & 0xFFFFFF
        if kind is PktKind.ACK:
            psn = first + (msg.n_req - 1 if msg is not None else 0)
            self._msgs.pop(key, None)
            return psn & _PSN, aeth(AETH_ACK, msn), payload, int(BthOpcode.ACKNOWLEDGE)
        if kind is PktKind.ATOMIC_RESP:
            self._msgs.pop(key, None)
            order = src.nic.profile.atomic_byte_order
            old = int.from_bytes(pkt.payload or bytes(8), order)
            ext = aeth(AETH_ACK, msn) + struct.pack("!Q", old)  # AtomicAckETH
            return first & _PSN, ext, payload, int(BthOpcode.ATOMIC_ACKNOWLEDGE)
        # READ_RESP
        index = pkt.offset // src.nic.profile.mtu
        payload = pkt.payload or b""
        if pkt.first and pkt.last:
            opcode = BthOpcode.RDMA_READ_RESPONSE_ONLY
        elif pkt.first:
            opcode = BthOpcode.RDMA_READ_RESPONSE_FIRST
        elif pkt.last:
            opcode = BthOpcode.RDMA_READ_RESPONSE_LAST
        else:
            opcode = BthOpcode.RDMA_READ_RESPONSE_MIDDLE
        ext = b"" if opcode is BthOpcode.RDMA_READ_RESPONSE_MIDDLE else aeth(AETH_ACK, msn)
        if pkt.last:
            self._msgs.pop(key, None)
        return (first + index) & _PSN, ext, payload, int(opcode)


__all__ = ["Capture", "PcapWriter"]
