"""The KBTP exception tree (defined in :mod:`kbtpsim.wire.errors`): every error carries the
Status a target answers it with."""

from kbtpsim.wire.errors import (
    AlreadyBound,
    DecodeError,
    Internal,
    InvalidHandle,
    KbtpError,
    Malformed,
    NoSpace,
    NotSealed,
    NotValid,
    Sealed,
    StaleGeneration,
    TicketAbandoned,
    TooLarge,
)

__all__ = [
    "AlreadyBound",
    "DecodeError",
    "Internal",
    "InvalidHandle",
    "KbtpError",
    "Malformed",
    "NoSpace",
    "NotSealed",
    "NotValid",
    "Sealed",
    "StaleGeneration",
    "TicketAbandoned",
    "TooLarge",
]
