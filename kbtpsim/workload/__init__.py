"""Workloads: generators of request descriptions (:mod:`kbtpsim.workload.generators`),
independent of the simulator; :mod:`kbtpsim.run` drives them as simpy processes."""

from kbtpsim.workload.generators import (
    FOREIGN_HANDLE,
    DecodeWorkload,
    HandlePicker,
    LengthSampler,
    PrefillWorkload,
    Request,
    Sequence,
    SequenceRegistry,
    SyntheticWorkload,
    Workload,
    blocks_of,
)

__all__ = [
    "FOREIGN_HANDLE", "DecodeWorkload", "HandlePicker", "LengthSampler", "PrefillWorkload",
    "Request", "Sequence", "SequenceRegistry", "SyntheticWorkload", "Workload", "blocks_of",
]
