"""Work-completion statuses and the exceptions of the NIC model's API.

:class:`WcStatus` carries the values of ``enum ibv_wc_status`` (rdma-core
``libibverbs/verbs.h``), so a chain sees the status a real NIC reports. Exceptions are for
misuse of the Python API (posting to a full ring, an unknown STag handle, a capability the
profile lacks); faults of the *simulated* hardware are never exceptions, they complete work
requests with an error status and move the queue pair to the error state.
"""

from __future__ import annotations

from enum import IntEnum


class WcStatus(IntEnum):
    """Status of a completion (values of ``ibv_wc_status``)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1  #: receive buffer too small / local length error
    LOC_QP_OP_ERR = 2  #: malformed WQE (bad opcode, too many segments)
    LOC_PROT_ERR = 4  #: local STag invalid, out of range or without the right
    WR_FLUSH_ERR = 5  #: flushed because the QP is in the error state
    MW_BIND_ERR = 6
    REM_INV_REQ_ERR = 9  #: responder found the request invalid (e.g. too long)
    REM_ACCESS_ERR = 10  #: responder STag invalid, out of range or without the right
    REM_OP_ERR = 11  #: responder could not complete the operation
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    GENERAL_ERR = 21


class NicError(Exception):
    """Base of the NIC model's API errors."""


class RingFull(NicError):
    """Posting to a send or receive ring that has no free slot."""


class CapabilityError(NicError):
    """The profile lacks a capability the call needs (e.g. strided keys, WAIT/ENABLE)."""


class WqeDecodeError(NicError):
    """Bytes that are not a well-formed WQE; the NIC completes them with LOC_QP_OP_ERR."""


class ProtectionError(NicError):
    """Bad registration or binding request (overlapping range, unknown STag, bad rights)."""


class CqOverrun(NicError):
    """A completion queue received more CQEs than its depth before they were polled."""
