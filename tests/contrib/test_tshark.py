"""tshark reads ``kbtpsim run --pcap`` with Wireshark's own RoCEv2 dissector and the KBTP
dissector (contrib/wireshark/kbtp.lua), and agrees with scapy and kbtpsim.wire frame by
frame. Skipped, with the reason, where tshark is not installed (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kbtpsim import wire
from kbtpsim.cli import main
from kbtpsim.nic.pcap import PcapWriter
from kbtpsim.nic.roce import Endpoint, bth, frame
from tests.nic.test_pcap import BTH, read_frames, scapy_all

REPO = Path(__file__).resolve().parents[2]
LUA = REPO / "contrib" / "wireshark" / "kbtp.lua"
TSHARK = shutil.which("tshark")
#: CI (.ci/run, CI=true) installs tshark: there these tests run, never skip
pytestmark = pytest.mark.skipif(
    TSHARK is None and os.environ.get("CI") != "true",
    reason="tshark is not installed (.ci/run installs Debian's tshark; apt-get install tshark)")
#: Wireshark's RPC-over-RDMA heuristic would claim some KBTP requests first (docs/tools.md)
DISABLE = ["--disable-heuristic", "rpcrdma_infiniband"]
#: Send opcodes: octets before the KBTP bytes (ImmDt, IETH)
SENDS_ALL = {0x00: 0, 0x01: 0, 0x02: 0, 0x03: 4, 0x04: 0, 0x05: 4, 0x16: 4, 0x17: 4}


def tshark(pcap: Path, *args: str) -> list[list[str]]:
    assert TSHARK is not None, "CI=true but no tshark: .ci/run should have installed it"
    out = subprocess.run([TSHARK, "-n", *DISABLE, "-X", f"lua_script:{LUA}", "-r", str(pcap),
                          *args],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "Lua: Error" not in out.stderr and "error" not in out.stderr.lower(), out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def quickstart_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tshark")
    pcap = d / "quickstart.pcap"
    assert main(["run", str(REPO / "scenarios" / "quickstart.yaml"), "-q", "-o",
                 str(d / "r"), "--set", "stop.operations=50", "--pcap", str(pcap)]) == 0
    return pcap


def test_wiresharks_roce_dissector_reads_every_frame_as_scapy_does(quickstart_pcap: Path
                                                                    ) -> None:
    rows = tshark(quickstart_pcap, "-T", "fields", "-e", "infiniband.bth.opcode",
                  "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
                  "-e", "udp.dstport")
    frames = read_frames(quickstart_pcap)
    assert len(rows) == len(frames)
    for row, (_, data) in zip(rows, frames, strict=True):
        b = scapy_all.Ether(data)[BTH]
        assert row == [str(b.opcode), f"{b.dqpn:#08x}", str(b.psn), "4791"]


def test_the_kbtp_dissector_decodes_every_message(quickstart_pcap: Path) -> None:
    fields = ["frame.number", "kbtp.opcode", "kbtp.request_id", "kbtp.handle",
              "kbtp.generation", "kbtp.status", "kbtp.data_descriptor.length"]
    rows = tshark(quickstart_pcap, "-Y", "kbtp", "-T", "fields",
                  *(x for f in fields for x in ("-e", f)))
    got = {int(r[0]): r[1:] for r in rows}
    want = {}
    partial: dict[tuple[str, int], tuple[int, bytes]] = {}  # a Send's first frame, octets
    for n, (_, data) in enumerate(read_frames(quickstart_pcap), start=1):
        pkt = scapy_all.Ether(data)
        b = pkt[BTH]
        if b.opcode not in SENDS_ALL:
            continue
        body = bytes(b.payload)[SENDS_ALL[b.opcode]:]
        body = body[: len(body) - b.padcount]
        key = (pkt[scapy_all.IP].src, b.dqpn)
        first, head = partial.pop(key, (n, b""))
        if b.opcode in (0x00, 0x01):  # more to come
            partial[key] = (first, head + body)
            continue
        msg = wire.decode(head + body)
        dd = getattr(msg, "data_descriptor", None)
        want[first] = [f"{int(msg.OPCODE):#04x}", str(msg.request_id), f"{msg.handle:#018x}",
                       str(msg.generation), str(int(msg.status)),
                       "" if dd is None else str(dd.length)]
    assert len(want) > 100
    for n, row in want.items():
        assert got.get(n) == row, n
    # beyond these it claims only the First packets of Sends the run stopped in the middle of
    assert len(set(got) - set(want)) <= len(partial)
    names = tshark(quickstart_pcap, "-Y", "kbtp", "-T", "fields", "-e", "_ws.col.Info")
    infos = {r[0].split(" ")[0] for r in names}
    assert {"HELLO", "HELLO_ACK", "LOAD", "ALLOC_STORE", "FREE", "COMPLETION"} <= infos


def test_the_addr_le_preference_decodes_little_endian_fields(tmp_path: Path) -> None:
    msg = wire.Load(request_id=7, handle=0x4001, data_descriptor=wire.DataDescriptor(
        stag=0x1234, tagged_offset=0x1000, length=4096))
    pcap = tmp_path / "le.pcap"
    a, b = Endpoint.numbered(0), Endpoint.numbered(1)
    with pcap.open("wb") as fh:
        w = PcapWriter(fh)
        for n, le in enumerate((False, True)):
            body = wire.encode(msg, addr_le=le)
            w.write(1000 * n, frame(a, b, 0xC000, bth(0x04, 0x100, n, pad=-len(body) % 4,
                                                          ack_req=True), body))
    cols = ["-T", "fields", "-e", "kbtp.handle", "-e", "kbtp.data_descriptor.stag",
            "-e", "kbtp.data_descriptor.length"]
    plain = tshark(pcap, *cols)
    le = tshark(pcap, "-o", "kbtp.addr_le:TRUE", *cols)
    right = ["0x0000000000004001", "0x00001234", "4096"]
    assert plain[0] == right and le[1] == right
    assert plain[1] != right and le[0] != right
