"""What the chain verifier reports: one broken rule (:class:`Violation`), and the error
a rejected chain raises (:class:`ChainRejected`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: which WR, which field (or read), which rule, and why."""

    wr: str
    field: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.wr}.{self.field}: [{self.rule}] {self.message}"


class ChainRejected(Exception):
    """A chain failed verification; ``violations`` lists every broken rule."""

    def __init__(self, chain: str, profile: str, violations: list[Violation]) -> None:
        self.violations = violations
        lines = "; ".join(str(v) for v in violations)
        super().__init__(f"chain {chain!r} rejected on profile {profile!r}: {lines}")


__all__ = ["ChainRejected", "Violation"]
