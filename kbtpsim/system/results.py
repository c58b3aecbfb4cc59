"""What the initiator's operations return, and how they fail."""

from __future__ import annotations

from dataclasses import dataclass

from kbtpsim.nic import WcStatus
from kbtpsim.wire import Completion, Status


class RdmaError(Exception):
    """A one-sided RDMA operation completed with an error status (the connection is now
    broken, as on hardware)."""

    def __init__(self, what: str, status: WcStatus) -> None:
        super().__init__(what, status)  # simpy re-raises a copy built from ``args``
        self.what = what
        self.status = status

    def __str__(self) -> str:
        return f"{self.what} failed: {self.status.name}"


class ConnectionLost(Exception):
    """The connection broke (or was closed) while a request was outstanding."""


class HelloRejected(Exception):
    """The target answered HELLO with a non-zero status."""

    def __init__(self, status: Status | int) -> None:
        super().__init__(status)  # simpy re-raises a copy built from ``args``
        self.status = status

    def __str__(self) -> str:
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        return f"HELLO rejected: {name}"


class Discard(list):  # type: ignore[type-arg]
    """A list that keeps nothing: what ``Initiator.results`` / ``received`` and
    ``SoftwareTargetServer.log`` become when they are not kept (long runs without an
    oracle). Appends, extends and ``+=`` are accepted and dropped."""

    def append(self, item: object) -> None:
        pass

    def extend(self, items: object) -> None:
        pass

    def insert(self, index: object, item: object) -> None:
        pass

    def __iadd__(self, items: object) -> Discard:  # type: ignore[override]
        return self


@dataclass(frozen=True, slots=True)
class OpResult:
    """One finished operation. Times are ps; ``completion`` is None only for GOODBYE."""

    op: str
    handle: int
    completion: Completion | None
    posted_at: int
    completed_at: int
    data: bytes | None = None  #: the loaded octets (LOAD, DIRECT_LOAD), if OK
    stag: int | None = None  #: the request's window STag, if any
    stag_revoked: bool | None = None  #: the target's Send with Invalidate revoked it
    direct: bool = False  #: served one-sidedly (DIRECT_LOAD / DIRECT_ALLOC)
    attempts: int = 1  #: DIRECT_LOAD entry/block/entry rounds (before any fallback)
    ticket: int | None = None  #: DIRECT_ALLOC

    @property
    def status(self) -> Status | int:
        return Status.OK if self.completion is None else self.completion.status

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def latency_ps(self) -> int:
        return self.completed_at - self.posted_at

    @property
    def latency_ns(self) -> float:
        return self.latency_ps / 1000


__all__ = ["ConnectionLost", "Discard", "HelloRejected", "OpResult", "RdmaError"]
