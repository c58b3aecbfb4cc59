"""The KBTP exception tree: every error carries the Status a target answers it with.

A request processor raises these and turns them into completions; nothing else needs to
know which check failed (h2's error-code style, see shared/STYLE.md). It lives in the wire
layer, beside the Status codes it carries and the codec whose DecodeError is one of them,
so the wire package imports nothing above it; :mod:`kbtpsim.errors` is its public name.
"""

from __future__ import annotations

from typing import ClassVar

from kbtpsim.wire.constants import Status


class KbtpError(Exception):
    """Base of every KBTP protocol error; ``status`` is what the completion carries."""

    status: ClassVar[Status] = Status.INTERNAL


class InvalidHandle(KbtpError):
    status = Status.INVALID_HANDLE


class StaleGeneration(KbtpError):
    status = Status.STALE_GENERATION


class NotValid(KbtpError):
    status = Status.NOT_VALID


class AlreadyBound(KbtpError):
    status = Status.ALREADY_BOUND


class NoSpace(KbtpError):
    status = Status.NO_SPACE


class Sealed(KbtpError):
    status = Status.SEALED


class NotSealed(KbtpError):
    status = Status.NOT_SEALED


class TooLarge(KbtpError):
    status = Status.TOO_LARGE


class Malformed(KbtpError):
    status = Status.MALFORMED


class Internal(KbtpError):
    status = Status.INTERNAL


class TicketAbandoned(KbtpError):
    status = Status.TICKET_ABANDONED


class DecodeError(Malformed):
    """Bytes that are not a well-formed KBTP message or structure.

    The only exception :func:`kbtpsim.wire.decode` raises. ``offset`` is the octet where
    the problem was found, ``reason`` says what it is.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"malformed at octet {offset}: {reason}")
        self.offset = offset
        self.reason = reason
