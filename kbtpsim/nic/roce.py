"""RoCEv2 frames: Ethernet, IPv4, UDP (destination port 4791), the InfiniBand transport
headers and the ICRC, octet for octet.

The layout is the InfiniBand Architecture Specification's (vol. 1, ch. 9: BTH 9.2, RETH
9.3.3, AtomicETH 9.3.4, AETH 9.3.5, AtomicAckETH 9.3.6, ImmDt 9.3.7, IETH 9.3.8; ICRC
7.8.1) carried over UDP/IPv4 as its RoCEv2 annex (A17) defines: the ICRC is a CRC-32 over
eight octets of ones (where the LRH would be), the IPv4 header with Type of Service, TTL and
Header Checksum replaced by ones, the UDP header with its checksum replaced by ones, the BTH
with its reserved octet (FECN, BECN, resv6) replaced by ones, the extended headers, the
payload and its pad; it is sent as the little-endian octets of the CRC (what Linux's
software RoCE and ConnectX NICs put on the wire). Multi-octet header fields are big-endian.
The UDP checksum is 0 (allowed for IPv4; A17.4.4.3).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

ROCE_UDP_PORT = 4791  #: IANA port of RoCEv2 (A17.4.4.1)
ETH_IPV4 = 0x0800
DEFAULT_PKEY = 0xFFFF
BTH_LEN = 12
ICRC_LEN = 4
HEADERS_LEN = 14 + 20 + 8 + BTH_LEN  #: Ethernet + IPv4 + UDP + BTH


class BthOpcode(IntEnum):
    """Reliable Connected opcodes (IBA 9.2, table 38)."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_WITH_IMMEDIATE = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_WITH_IMMEDIATE = 0x05
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RDMA_WRITE_ONLY = 0x0A
    RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    ATOMIC_ACKNOWLEDGE = 0x12
    COMPARE_SWAP = 0x13
    FETCH_ADD = 0x14
    SEND_LAST_WITH_INVALIDATE = 0x16
    SEND_ONLY_WITH_INVALIDATE = 0x17


#: AETH syndromes (IBA 9.7.5.2): ACK with "invalid" credits (no end-to-end credits), and
#: the NAK codes
AETH_ACK = 0x1F
AETH_NAK = 0x60
NAK_INVALID_REQUEST = 1
NAK_REMOTE_ACCESS = 2
NAK_REMOTE_OPERATIONAL = 3


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A port's Ethernet and IPv4 address."""

    mac: bytes
    ip: bytes

    @classmethod
    def numbered(cls, n: int) -> Endpoint:
        """Port ``n`` (from 0): 10.0.0.1, 10.0.0.2, ... and MAC 02:00:0a:00:00:01, ..."""
        host = (10 << 24) + n + 1
        ip = host.to_bytes(4, "big")
        return cls(b"\x02\x00" + ip, ip)


def reth(va: int, rkey: int, length: int) -> bytes:
    """RDMA Extended Transport Header (IBA 9.3.3): VA, R_Key, DMA Length."""
    return struct.pack("!QII", va & (2**64 - 1), rkey & 0xFFFFFFFF, length & 0xFFFFFFFF)


def atomic_eth(va: int, rkey: int, swap_add: int, compare: int) -> bytes:
    """Atomic Extended Transport Header (IBA 9.3.4): VA, R_Key, Swap (Add) Data, Compare
    Data."""
    m = 2**64 - 1
    return struct.pack("!QIQQ", va & m, rkey & 0xFFFFFFFF, swap_add & m, compare & m)


def aeth(syndrome: int, msn: int) -> bytes:
    """ACK Extended Transport Header (IBA 9.3.5): Syndrome, MSN."""
    return struct.pack("!I", (syndrome & 0xFF) << 24 | (msn & 0xFFFFFF))


def bth(opcode: int, dest_qp: int, psn: int, *, pad: int = 0, ack_req: bool = False,
        solicited: bool = False, pkey: int = DEFAULT_PKEY) -> bytes:
    """Base Transport Header (IBA 9.2)."""
    flags = (solicited << 7) | ((pad & 3) << 4)  # SE, M=0, PadCnt, TVer=0
    return struct.pack("!BBHII", opcode, flags, pkey, dest_qp & 0xFFFFFF,
                       (ack_req << 31) | (psn & 0xFFFFFF))


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icrc(ip_to_pad: bytes) -> bytes:
    """The ICRC of a RoCEv2/IPv4 packet, given its octets from the IPv4 header to the end of
    the pad (A17.3.3: the variant fields are masked with ones before the CRC)."""
    masked = bytearray(ip_to_pad)
    masked[1] = 0xFF  # Type of Service (DSCP, ECN)
    masked[8] = 0xFF  # TTL
    masked[10:12] = b"\xff\xff"  # Header Checksum
    masked[26:28] = b"\xff\xff"  # UDP Checksum
    masked[32] = 0xFF  # BTH reserved octet (FECN, BECN, resv6)
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + masked))


def frame(src: Endpoint, dst: Endpoint, sport: int, transport: bytes, payload: bytes,
          *, tos: int = 0, ttl: int = 64) -> bytes:
    """One Ethernet frame (no FCS): ``transport`` is the BTH (with the pad count of
    ``payload``) and the extended headers; the payload is padded to four octets and the
    ICRC appended."""
    pad = -len(payload) % 4
    udp_len = 8 + len(transport) + len(payload) + pad + ICRC_LEN
    ip_len = 20 + udp_len
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, ip_len, 0, 0x4000, ttl, 17, 0,
                               src.ip, dst.ip))
    ip[10:12] = _ip_checksum(bytes(ip)).to_bytes(2, "big")
    udp = struct.pack("!HHHH", sport, ROCE_UDP_PORT, udp_len, 0)
    body = bytes(ip) + udp + transport + payload + bytes(pad)
    return dst.mac + src.mac + ETH_IPV4.to_bytes(2, "big") + body + icrc(body)


def pad_of(payload_len: int) -> int:
    """PadCnt of a payload of ``payload_len`` octets."""
    return -payload_len % 4


__all__ = [
    "AETH_ACK", "AETH_NAK", "BTH_LEN", "HEADERS_LEN", "ICRC_LEN", "ROCE_UDP_PORT",
    "BthOpcode", "Endpoint", "aeth", "atomic_eth", "bth", "frame", "icrc", "pad_of", "reth",
]
