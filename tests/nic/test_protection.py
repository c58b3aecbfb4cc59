"""Regions, windows, strided keys and the translate check."""

from __future__ import annotations

import pytest

from kbtpsim.nic import Access, ProtectionError
from kbtpsim.nic.protection import INVALID_STAG, ProtectionTable

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def test_translate_checks_range_and_rights() -> None:
    pt = ProtectionTable()
    mr = pt.register(0x1000, 0x100, RW)
    assert pt.translate(mr.stag, 0x1010, 16, Access.REMOTE_READ) == 0x1010
    assert pt.translate(mr.stag, 0x10F8, 9, Access.REMOTE_READ) == -1  # past the end
    assert pt.translate(mr.stag, 0xFFF, 1, Access.LOCAL_READ) == -1  # before the start
    assert pt.translate(mr.stag, 0x1000, 8, Access.REMOTE_ATOMIC) == -1  # no right
    assert pt.translate(mr.stag + 1, 0x1000, 8, Access.LOCAL_READ) == -1  # unknown key
    assert mr.stag != INVALID_STAG


def test_base_to_and_deregister() -> None:
    pt = ProtectionTable()
    mr = pt.register(0x5000, 64, RW, base_to=0)
    assert pt.translate(mr.stag, 8, 8, Access.REMOTE_READ) == 0x5008
    pt.deregister(mr.stag)
    assert pt.translate(mr.stag, 8, 8, Access.REMOTE_READ) == -1
    with pytest.raises(ProtectionError):
        pt.deregister(mr.stag)


def test_registration_errors() -> None:
    pt = ProtectionTable()
    with pytest.raises(ProtectionError, match="LOCAL_WRITE"):
        pt.register(0, 64, Access.REMOTE_WRITE)
    with pytest.raises(ProtectionError, match="positive"):
        pt.register(0, 0, RW)


def test_windows_are_bound_to_one_qp_and_invalidate() -> None:
    pt = ProtectionTable()
    parent = pt.register(0x1000, 0x1000, RW | Access.MW_BIND)
    mw = pt.bind_window(parent, 7, 0x1100, 0x100, Access.REMOTE_READ)
    assert pt.translate(mw.stag, 0x1100, 8, Access.REMOTE_READ, qpn=7) == 0x1100
    assert pt.translate(mw.stag, 0x1100, 8, Access.REMOTE_READ, qpn=8) == -1
    assert pt.translate(mw.stag, 0x1100, 8, Access.REMOTE_WRITE, qpn=7) == -1
    assert pt.invalidate(mw.stag)
    assert pt.translate(mw.stag, 0x1100, 8, Access.REMOTE_READ, qpn=7) == -1
    assert not pt.invalidate(mw.stag)
    with pytest.raises(ProtectionError, match="inside"):
        pt.bind_window(parent, 7, 0x1F00, 0x200, Access.REMOTE_READ)
    plain = pt.register(0x3000, 64, RW)
    with pytest.raises(ProtectionError, match="MW_BIND"):
        pt.bind_window(plain, 7, 0x3000, 8, Access.REMOTE_READ)


def test_strided_key_maps_index_times_stride_to_entry() -> None:
    pt = ProtectionTable()
    key = pt.register_strided(0x10000, 16, 1000, 1 << 16, Access.REMOTE_READ)
    assert pt.translate(key.stag, 5 << 16, 16, Access.REMOTE_READ) == 0x10000 + 80
    assert pt.translate(key.stag, (5 << 16) + 8, 8, Access.REMOTE_READ) == 0x10000 + 88
    assert pt.translate(key.stag, (5 << 16) + 8, 16, Access.REMOTE_READ) == -1  # crosses
    assert pt.translate(key.stag, 1000 << 16, 16, Access.REMOTE_READ) == -1  # past table
    with pytest.raises(ProtectionError, match="stride"):
        pt.register_strided(0, 16, 4, 0, Access.REMOTE_READ)


def test_strided_key_stride_one_with_a_handle_base() -> None:
    """Handles 0x4000.. name entries 0..: the handle itself is the Tagged Offset."""
    pt = ProtectionTable()
    key = pt.register_strided(0x9000, 16, 100, 1, Access.REMOTE_READ, base_index=0x4000)
    assert pt.translate(key.stag, 0x4000, 16, Access.REMOTE_READ) == 0x9000
    assert pt.translate(key.stag, 0x4063, 16, Access.REMOTE_READ) == 0x9000 + 16 * 99
    assert pt.translate(key.stag, 0x4064, 16, Access.REMOTE_READ) == -1  # past the table
    assert pt.translate(key.stag, 0x3FFF, 16, Access.REMOTE_READ) == -1  # below the base
    assert pt.translate(key.stag, 0x4001, 17, Access.REMOTE_READ) == -1  # beyond an entry
