"""Packet capture: RoCEv2 frames read back by an independent decoder (scapy's RoCE layers).

scapy parses Ethernet, IPv4, UDP and the BTH (with its ICRC, recomputed by scapy's own
code); the extended headers it has no layer for (RETH, AtomicETH, AtomicAckETH) are read
by octet offset as IBA vol. 1 ch. 9 lays them out.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kbtpsim.nic import Opcode, Sge, WorkRequest, WqeFlags
from kbtpsim.nic.pcap import Capture
from kbtpsim.nic.roce import Endpoint, bth, frame, icrc
from tests.nic.conftest import Pair, make_pair

scapy_all = pytest.importorskip("scapy.all", reason="scapy (the test extra) is not installed")
roce = pytest.importorskip("scapy.contrib.roce")
BTH, AETH = roce.BTH, roce.AETH


def read_frames(path: Path) -> list[tuple[int, bytes]]:
    """(time in ns, frame) of a nanosecond pcap, parsed by hand to check the header."""
    raw = path.read_bytes()
    magic, major, minor, _zone, _sig, _snap, link = struct.unpack_from("<IHHiIII", raw)
    assert (magic, major, minor, link) == (0xA1B23C4D, 2, 4, 1)
    out, pos = [], 24
    while pos < len(raw):
        sec, nsec, incl, orig = struct.unpack_from("<IIII", raw, pos)
        assert incl == orig
        out.append((sec * 10**9 + nsec, raw[pos + 16 : pos + 16 + incl]))
        pos += 16 + incl
    assert pos == len(raw)
    return out


def check_frame(data: bytes) -> object:
    """Parse with scapy; the ICRC and IPv4 checksum must be what scapy computes."""
    pkt = scapy_all.Ether(data)
    assert pkt[scapy_all.UDP].dport == 4791
    b = pkt[BTH]
    assert bytes(data[-4:]) == b.compute_icrc(None), "ICRC"
    ip = pkt[scapy_all.IP]
    chk = ip.chksum
    del ip.chksum
    assert scapy_all.IP(bytes(ip)).chksum == chk, "IPv4 checksum"
    assert ip.len == len(data) - 14
    return pkt


def _workload(tmp_path: Path, capture: bool = True) -> tuple[list[tuple[int, bytes]], Pair]:
    p = make_pair()
    p.a.host.memory.write(p.bufa, bytes(range(256)) * 40)
    p.b.host.memory.write(p.bufb + 0x8000, (7).to_bytes(8, "big"))
    ops = [
        WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, 9000, p.mra.lkey),), WqeFlags.SIGNALED,
                    remote_addr=p.bufb, rkey=p.mrb.rkey),
        WorkRequest(Opcode.RDMA_READ, (Sge(p.bufa + 0x4000, 5000, p.mra.lkey),),
                    WqeFlags.SIGNALED, remote_addr=p.bufb, rkey=p.mrb.rkey),
        WorkRequest(Opcode.FETCH_ADD, (Sge(p.bufa + 0x9000, 8, p.mra.lkey),),
                    WqeFlags.SIGNALED, remote_addr=p.bufb + 0x8000, rkey=p.mrb.rkey,
                    swap_add=5),
        WorkRequest(Opcode.CAS, (Sge(p.bufa + 0x9008, 8, p.mra.lkey),), WqeFlags.SIGNALED,
                    remote_addr=p.bufb + 0x8000, rkey=p.mrb.rkey, compare=12, swap_add=99),
        WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED, inline_data=b"hello"),
        WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, 64, p.mra.lkey),), WqeFlags.SIGNALED,
                    remote_addr=p.bufb, rkey=0xBAD),  # refused: a NAK
    ]
    p.qb.post_recv([Sge(p.bufb + 0xA000, 64, p.mrb.lkey)])
    for wr in ops:
        p.qa.post_send(wr)
    p.qa.ring_doorbell()
    if not capture:
        p.run()
        return [], p
    out = tmp_path / "pair.pcap"
    with Capture(p.sim.env, out, p.sim.nics):
        p.run()
    return read_frames(out), p


def test_frames_parse_with_valid_icrc_and_transport_fields(tmp_path: Path) -> None:
    frames, p = _workload(tmp_path)
    times = [t for t, _ in frames]
    assert times == sorted(times) and times[0] > 0
    pkts = [check_frame(d) for _, d in frames]
    a_ip, b_ip = "10.0.0.1", "10.0.0.2"
    req = [x for x in pkts if x[scapy_all.IP].src == a_ip]
    resp = [x for x in pkts if x[scapy_all.IP].src == b_ip]
    assert all(x[scapy_all.IP].dst == b_ip and x[BTH].dqpn == p.qb.qpn for x in req)
    assert all(x[scapy_all.IP].dst == a_ip and x[BTH].dqpn == p.qa.qpn for x in resp)
    # requests: Write 9000 = 3 packets (MTU 4096), Read 5000 (2 response PSNs), FetchAdd,
    # CmpSwap, Send, refused Write
    assert [x[BTH].opcode for x in req] == [0x06, 0x07, 0x08, 0x0C, 0x14, 0x13, 0x04, 0x0A]
    assert [x[BTH].psn for x in req] == [0, 1, 2, 3, 5, 6, 7, 8]
    assert [x[BTH].ackreq for x in req] == [0, 0, 1, 1, 1, 1, 1, 1]
    write = [bytes(x[BTH].payload) for x in req[:3]]
    va, rkey, length = struct.unpack("!QII", write[0][:16])
    assert (va, rkey, length) == (p.bufb, p.mrb.rkey, 9000)
    data = write[0][16:] + write[1] + write[2]  # scapy keeps the ICRC apart
    assert data == (bytes(range(256)) * 40)[:9000]
    assert [len(x[BTH].payload) for x in req[:3]] == [16 + 4096, 4096, 808]
    rd = bytes(req[3][BTH].payload)
    assert struct.unpack("!QII", rd[:16]) == (p.bufb, p.mrb.rkey, 5000) and len(rd) == 16
    fa = bytes(req[4][BTH].payload)
    assert struct.unpack("!QIQQ", fa[:28]) == (p.bufb + 0x8000, p.mrb.rkey, 5, 0)
    cas = bytes(req[5][BTH].payload)
    assert struct.unpack("!QIQQ", cas[:28]) == (p.bufb + 0x8000, p.mrb.rkey, 99, 12)
    send = req[6][BTH]
    assert send.padcount == 3 and bytes(send.payload)[:5] == b"hello"
    # responses: ACK (Write), Read response first/last, AtomicAck x2, ACK (Send), NAK
    ops = [x[BTH].opcode for x in resp]
    assert ops == [0x11, 0x0D, 0x0F, 0x12, 0x12, 0x11, 0x11]
    assert [x[BTH].psn for x in resp] == [2, 3, 4, 5, 6, 7, 8]
    acks = [x for x in resp if x[BTH].opcode == 0x11]
    assert [x[AETH].syndrome for x in acks] == [0x1F, 0x1F, 0x60 | 2]  # NAK: access error
    assert [x[AETH].msn for x in acks] == [1, 5, 5]
    old = [struct.unpack("!IQ", bytes(x[BTH].payload)[:12])[1] for x in resp[3:5]]
    assert old == [7, 12]  # FetchAdd saw 7; the CmpSwap then saw 12 and swapped
    assert bytes(resp[1][BTH].payload)[4:] + bytes(resp[2][BTH].payload)[4:] == \
        (bytes(range(256)) * 40)[:5000]


def test_icrc_matches_scapy_for_every_pad_and_a_changed_octet_breaks_it() -> None:
    a, b = Endpoint.numbered(0), Endpoint.numbered(1)
    for n in range(9):
        data = frame(a, b, 0xC001, bth(0x04, 0x123, 77, pad=-n % 4), bytes(range(n)),
                     tos=0x02, ttl=7)
        check_frame(data)
        # the masked fields do not enter the ICRC; the payload does
        assert icrc(data[14:-4]) == icrc(data[14:15] + b"\x00" + data[16:22] + b"\x40"
                                         + data[23:-4])
        bad = bytearray(data)
        bad[-5] ^= 1
        assert bad[-4:] != icrc(bytes(bad[14:-4]))


def test_a_capture_changes_no_simulated_time(tmp_path: Path) -> None:
    frames, with_pcap = _workload(tmp_path)
    _, without = _workload(tmp_path, capture=False)
    assert len(frames) == 15
    assert with_pcap.sim.now == without.sim.now

    def cqes(p: Pair) -> list[tuple[int, int, str, int]]:
        return [(c.time, c.wr_id, c.status.name, c.byte_len) for c in p.cqa.poll(64)]

    a, b = cqes(with_pcap), cqes(without)
    assert a == b and len(a) == 6


def test_masked_atomics_and_a_little_endian_responder(tmp_path: Path) -> None:
    """Masked FetchAdd: its mask in Compare Data; masked CmpSwap: the masks after the
    AtomicETH; the AtomicAckETH is big-endian whatever the responder's memory order."""
    p = make_pair("ideal")  # atomics in little-endian memory
    p.b.host.memory.write(p.bufb + 64, (0x1_0000_0010).to_bytes(8, "little"))
    p.qa.post_send(WorkRequest(Opcode.MASKED_FETCH_ADD, (Sge(p.bufa, 8, p.mra.lkey),),
                               WqeFlags.SIGNALED, remote_addr=p.bufb + 64, rkey=p.mrb.rkey,
                               swap_add=0x1_0000_0010, swap_mask=0x8000_0000_8000_0020))
    p.qa.post_send(WorkRequest(Opcode.MASKED_CAS, (Sge(p.bufa + 8, 8, p.mra.lkey),),
                               WqeFlags.SIGNALED, remote_addr=p.bufb + 64, rkey=p.mrb.rkey,
                               swap_add=0xAA, compare=0x2_0000_0020, swap_mask=0xFF,
                               compare_mask=2**64 - 1))
    p.qa.ring_doorbell()
    out = tmp_path / "masked.pcap"
    with Capture(p.sim.env, out, p.sim.nics):
        p.run()
    pkts = [check_frame(d) for _, d in read_frames(out)]
    assert [x[BTH].opcode for x in pkts] == [0x14, 0x13, 0x12, 0x12]  # pipelined
    fa, cas, fa_ack, cas_ack = (bytes(x[BTH].payload) for x in pkts)
    assert struct.unpack("!QIQQ", fa) == (p.bufb + 64, p.mrb.rkey, 0x1_0000_0010,
                                          0x8000_0000_8000_0020)
    assert struct.unpack("!QIQQQQ", cas) == (p.bufb + 64, p.mrb.rkey, 0xAA, 0x2_0000_0020,
                                             0xFF, 2**64 - 1)
    assert struct.unpack("!IQ", fa_ack)[1] == 0x1_0000_0010
    assert struct.unpack("!IQ", cas_ack)[1] == 0x2_0000_0020
    assert p.b.host.memory.read_u64(p.bufb + 64, "little") == 0x2_0000_00AA
