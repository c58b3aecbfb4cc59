"""The message length: a request whose octet count disagrees with its header.

A WR cannot see how many octets a receive got; the chains read the byte count from the
receive's CQE in the receive CQ's buffer (``Nic.create_cq(..., buffer_addr=)``) and serve a
request only if it equals what the variant expects (40, or 40 + Block Size for INLINE).
Everything else goes to the CPU, and every result must equal the software target's.
"""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.wire import AllocStore, DataDescriptor, Load, Store, encode

from .test_run import BE, BS, CX5S, DATA, FAST, INL, SEAL

CASES = [("ideal", True), ("ideal", False), ("cx5-upstream", False), ("ideal-be", False),
         CX5S]


def _status(raw: bytes) -> int:
    return int.from_bytes(raw[22:24], "big")


def _requests(h: Harness) -> tuple[list[object], list[int], list[bool]]:
    """(requests, expected statuses, served by the NIC on the fast profile)."""
    le = h.addr_le

    def enc(m: object) -> bytes:
        return encode(m, le)  # type: ignore[arg-type]

    def load(rid: int, length: int = BS) -> Load:
        return Load(request_id=rid, handle=0x4001,
                    data_descriptor=DataDescriptor(h.stag, h.buf(0), length))

    def store(rid: int, data: bytes = DATA, flags: int = INL) -> Store:
        return Store(request_id=rid, handle=0x4002, flags=flags,
                     data_descriptor=DataDescriptor(0, 0, BS), inline_data=data)

    def sread(rid: int) -> Store:
        return Store(request_id=rid, handle=0x4002,
                     data_descriptor=DataDescriptor(h.stag, h.buf(1 << 20), BS))

    full = enc(store(6))
    reqs: list[object] = [
        AllocStore(request_id=1, handle=0x4001, flags=INL | SEAL,
                   data_descriptor=DataDescriptor(0, 0, BS), inline_data=DATA),
        AllocStore(request_id=2, handle=0x4002, flags=INL,
                   data_descriptor=DataDescriptor(0, 0, BS), inline_data=DATA),
        enc(load(3)) + b"\x00" * 8,  # LOAD with trailing octets
        enc(load(4))[:36],  # LOAD cut inside its Data Descriptor
        enc(store(5)) + b"\x07" * 8,  # inline data longer than the descriptor Length
        full[:-8],  # inline data shorter than the descriptor Length (rid 6)
        enc(store(7))[:-16],  # descriptor says Block Size, 16 octets of data missing
        enc(sread(8)) + b"\x00",  # Read-source STORE with a trailing octet
        enc(AllocStore(request_id=9, handle=0x4003, flags=INL,
                       data_descriptor=DataDescriptor(0, 0, BS), inline_data=DATA)) + b"\xaa",
        enc(load(10)),  # well formed: the fast path again
        enc(store(11, DATA[::-1])),  # well formed inline STORE
        enc(sread(12)),  # well formed Read-source STORE
        load(13),
    ]
    statuses = [0, 0, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0]
    fast = [False] * 9 + [True, True, True, True]
    return reqs, statuses, fast


@pytest.mark.parametrize(("profile", "addr_le"), CASES)
def test_length_mismatches_go_to_the_cpu_and_agree(profile: str, addr_le: bool) -> None:
    h = Harness(profile, addr_le)
    h.write_ibuf(1 << 20, DATA[::-1])
    reqs, statuses, fast = _requests(h)
    res = h.run(reqs)  # type: ignore[arg-type]
    assert h.mismatches() == []
    got = [_status(res.completions[i + 1]) for i in range(len(reqs))]
    assert got == statuses
    served = [res.served[i + 1] is not None for i in range(len(reqs))]
    if (profile, addr_le) == FAST:
        assert served == fast
    elif (profile, addr_le) in (BE, CX5S):  # the two well-formed ALLOC_STOREs too
        assert served == [True, True, *fast[2:]]
    else:
        assert not any(served)


def test_receive_byte_count_is_read_from_the_cqe() -> None:
    """The marker reads the receive CQ's buffer, not a copy: the CQE slot of the credit
    holds the message length in big-endian octets 44..47."""
    h = Harness(*FAST, credits=2)
    msg = Load(request_id=1, handle=0x4001,
               data_descriptor=DataDescriptor(h.stag, h.buf(0), BS))
    raw = encode(msg, True) + b"\x00" * 3
    h.run([raw], hello=False)
    cq = h.server.recv_cq
    slot = h.tnic.host.memory.read(cq.slot_addr(0), 64)
    assert int.from_bytes(slot[44:48], "big") == len(raw)
    assert slot[63] >> 4 == 2  # mlx5 RESP_SEND
    assert h.mismatches() == []
