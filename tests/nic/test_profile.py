"""Profiles: registry, capability flags, validated overrides."""

from __future__ import annotations

import dataclasses

import pytest

from kbtpsim.nic import PROFILES, NicProfile, get_profile


def test_registry_names_and_capabilities() -> None:
    assert {"cx5", "irdma", "ideal", "cx3-40g-ib", "cx5-100g-roce"} <= set(PROFILES)
    cx5, irdma, ideal = PROFILES["cx5"], PROFILES["irdma"], PROFILES["ideal"]
    assert cx5.wqe_field_byte_order == "big" and cx5.wait_enable and cx5.cas_on_wqe
    assert cx5.masked_atomics and not cx5.native_conditional
    assert irdma.wqe_field_byte_order == "little" and not irdma.wait_enable
    assert ideal.native_conditional and ideal.strided_keys
    for p in PROFILES.values():
        assert dataclasses.is_dataclass(p) and p.max_sge >= 1
        for flag in ("wait_enable", "masked_atomics", "cas_on_wqe", "native_conditional",
                     "strided_keys", "max_sge", "wqe_field_byte_order"):
            assert hasattr(p, flag)


def test_replace_validates() -> None:
    p = PROFILES["cx5"].replace(prefetch_depth=0, link_gbps=200.0)
    assert p.prefetch_depth == 0 and p.link_gbps == 200.0
    with pytest.raises(ValueError, match="'no_such_knob'"):
        PROFILES["cx5"].replace(no_such_knob=1)
    with pytest.raises(ValueError, match="'mtu'"):
        PROFILES["cx5"].replace(mtu=1000)
    with pytest.raises(ValueError, match="'link_gbps'"):
        PROFILES["cx5"].replace(link_gbps=0)
    with pytest.raises(ValueError, match="'mtu' must be a number"):
        PROFILES["cx5"].replace(mtu="4096")
    with pytest.raises(ValueError, match="'wqe_field_byte_order'"):
        PROFILES["cx5"].replace(wqe_field_byte_order="middle")
    with pytest.raises(ValueError, match="'placement'"):
        dataclasses.replace(PROFILES["cx5"], placement="sometimes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["cx5"].mtu = 1024  # type: ignore[misc]


def test_get_profile_unknown() -> None:
    assert isinstance(get_profile("irdma"), NicProfile)
    with pytest.raises(ValueError, match="unknown NIC profile 'x' \\(known: "):
        get_profile("x")


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_moves_data(name: str) -> None:
    from kbtpsim.nic import Opcode, Sge, WcStatus, WorkRequest, WqeFlags
    from tests.nic.conftest import make_pair

    p = make_pair(name)
    p.a.host.memory.write(p.bufa, b"payload!" * 1000)
    p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, 8000, p.mra.lkey),),
                               remote_addr=p.bufb, rkey=p.mrb.rkey))
    p.qa.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(p.bufa + 8192, 8000, p.mra.lkey),),
                               WqeFlags.SIGNALED, remote_addr=p.bufb, rkey=p.mrb.rkey))
    p.qa.ring_doorbell()
    p.run()
    assert [c.status for c in p.cqa.poll()] == [WcStatus.SUCCESS]
    assert p.a.host.memory.read(p.bufa + 8192, 8000) == b"payload!" * 1000
