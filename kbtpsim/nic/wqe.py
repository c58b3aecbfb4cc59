"""The binary work-queue-element (WQE) format, modelled on mlx5's.

A send WQE is a sequence of 16-octet segments, control segment first, in a fixed-size ring
slot (``NicProfile.sq_wqe_size``, 128 octets by default: two mlx5 basic blocks). Multi-octet
fields are in the profile's WQE byte order (``"big"`` as mlx5, ``"little"`` as irdma).

Control segment (16 octets)::

    0  opmod          1-2 WQE index      3 opcode        4-6 QP number    7 ds (16-octet units)
    8  signature      9-10 reserved      11 flags        12-15 immediate / STag to invalidate

Segments after it, by opcode (``[cond]`` only when ``WqeFlags.CONDITIONAL`` is set)::

    NOP                         ctrl
    SEND, SEND_WITH_IMM/INV     ctrl [cond] data*|inline
    RDMA_WRITE(_WITH_IMM), READ ctrl [cond] raddr data*|inline
    CAS, FETCH_ADD              ctrl [cond] raddr atomic(16) data
    MASKED_CAS/FETCH_ADD        ctrl [cond] raddr masked-atomic(32) data
    WAIT, ENABLE                ctrl [cond] wait
    LOCAL_INV                   ctrl (immediate = STag)

    raddr   remote address (8), rkey (4), reserved (4)
    data    byte count (4), lkey (4), address (8)
    inline  byte count | 0x80000000 (4), data, padded to 16
    atomic  swap or add (8), compare (8)
    masked  swap or add (8), compare or add-mask (8), swap mask (8), compare mask (8)
    wait    index (4): the CQ count to wait for / the WQE index to enable up to,
            object (4): CQ number / QP number, reserved (8)
    cond    address (8), lkey (4), reserved (4), compare (8), mask (8)  (model extension)

A receive WQE is an array of data segments; a short list ends with an entry of byte count 0
and lkey ``INVALID_STAG``. A *disarmed* WR (``armed=False``) is encoded with the segments of
its opcode but NOP in the control segment: a CAS on its first 8 octets arms it (RedN).

It is implemented in four modules, re-exported here: :mod:`~kbtpsim.nic.wqe_types` (opcodes,
flags, :class:`Sge`, :class:`Condition`, :class:`WorkRequest`, :class:`Wqe`),
:mod:`~kbtpsim.nic.wqe_layout` (the segments and fields of a WQE, :func:`field_layout`,
:func:`ctrl_word`, :func:`field_mask`), :mod:`~kbtpsim.nic.wqe_encode` (:func:`encode_wqe`,
:func:`encode_recv`) and :mod:`~kbtpsim.nic.wqe_decode` (:func:`decode_wqe`,
:func:`decode_recv`).
"""

from __future__ import annotations

from kbtpsim.nic.wqe_decode import decode_recv, decode_wqe
from kbtpsim.nic.wqe_encode import encode_recv, encode_wqe
from kbtpsim.nic.wqe_layout import (
    CTRL_SIZE,
    RECV_FIELDS,
    SEG,
    _segments,
    ctrl_word,
    field_layout,
    field_mask,
    wqe_size,
)
from kbtpsim.nic.wqe_types import (
    _WR_FIELDS,
    ATOMIC_OPS,
    DATA_OPS,
    INLINE_BIT,
    MASK64,
    MASKED_OPS,
    RADDR_OPS,
    SEND_OPS,
    WRITE_OPS,
    Condition,
    Opcode,
    Sge,
    WorkRequest,
    Wqe,
    WqeFlags,
)

__all__ = [
    "ATOMIC_OPS",
    "CTRL_SIZE",
    "DATA_OPS",
    "INLINE_BIT",
    "MASK64",
    "MASKED_OPS",
    "RADDR_OPS",
    "RECV_FIELDS",
    "SEG",
    "SEND_OPS",
    "WRITE_OPS",
    "_WR_FIELDS",
    "Condition",
    "Opcode",
    "Sge",
    "WorkRequest",
    "Wqe",
    "WqeFlags",
    "_segments",
    "ctrl_word",
    "decode_recv",
    "decode_wqe",
    "encode_recv",
    "encode_wqe",
    "field_layout",
    "field_mask",
    "wqe_size",
]
