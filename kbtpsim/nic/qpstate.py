"""QP states (values of ``ibv_qp_state``)."""

from __future__ import annotations

from enum import IntEnum


class QpState(IntEnum):
    INIT = 1
    RTS = 3
    ERROR = 6
