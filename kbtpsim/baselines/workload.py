"""Workload adaptations for the comparison.

* :class:`SlottedPrefill`: a KV-cache prefill initiator of a one-sided static target
  (``target.baseline.static_layout: sequence_slots``). Its region (``quota`` blocks) is
  carved into ``quota // S`` slots of ``S`` blocks, S = the blocks of the longest
  sequence: each sequence gets a whole slot (its worst case), its k-th block goes to
  ``slot offset + k x block_size``. When no slot is free it evicts its oldest sequence,
  as :class:`~kbtpsim.workload.PrefillWorkload` does when short of quota.
* :func:`kv_request`: the operation a KV-cache request is issued as (``kvcache.load_with``
  / ``store_with``: DIRECT_LOAD, DIRECT_ALLOC).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from kbtpsim.scenario.schema import TargetSpec, WorkloadSpec
from kbtpsim.workload import PrefillWorkload, Request, SequenceRegistry


class SlottedPrefill(PrefillWorkload):
    """:class:`PrefillWorkload` whose sequences each take one slot of a static region."""

    def __init__(self, spec: WorkloadSpec, rng: np.random.Generator,
                 registry: SequenceRegistry, *, block_size: int, **kwargs: Any) -> None:
        super().__init__(spec, rng, registry, **kwargs)
        kv = spec.kvcache
        self.block_size = block_size
        self.slot_blocks = -(-kv.sequence_tokens_max // kv.tokens_per_block)
        self.slots = self.limit // self.slot_blocks
        if self.slots < 1:
            raise ValueError(f"{self.name}: a region of {self.limit} blocks holds no "
                             f"sequence of {self.slot_blocks} blocks")
        self.slot_bytes = self.slot_blocks * block_size
        self.free_slots = list(range(self.slots))
        self.offsets: dict[int, int] = {}  #: handle -> offset in the region
        self._slot_of: dict[int, int] = {}  #: handle -> slot
        self._slot_left: dict[int, int] = {}  #: slot -> handles not yet freed

    @property
    def allocated_bytes(self) -> int:
        """Octets of the region in slots that hold (or are being given) a sequence."""
        return (self.slots - len(self.free_slots)) * self.slot_bytes

    def offset_of(self, handle: int) -> int:
        return self.offsets[handle]

    def _plan(self) -> bool:
        if not self.free_slots:
            return self._evict_oldest()
        before = self.seq_ids
        planned = super()._plan()
        if self.seq_ids != before and self.current is not None:
            slot = self.free_slots.pop(0)
            handles = self.current[1].handles
            self._slot_left[slot] = len(handles)
            for k, h in enumerate(handles):
                self.offsets[h] = slot * self.slot_bytes + k * self.block_size
                self._slot_of[h] = slot
        return planned

    def done(self, req: Request, ok: bool) -> None:
        super().done(req, ok)
        if req.op != "free":
            return
        self.offsets.pop(req.handle, None)
        slot = self._slot_of.pop(req.handle, None)
        if slot is None:
            return
        self._slot_left[slot] -= 1
        if not self._slot_left[slot]:
            del self._slot_left[slot]
            self.free_slots.append(slot)
            self.free_slots.sort()


def prefill_workload(tgt: TargetSpec, spec: WorkloadSpec, rng: np.random.Generator,
                     registry: SequenceRegistry, **kwargs: Any) -> PrefillWorkload:
    """The prefill generator for target ``tgt`` (a :class:`SlottedPrefill` for a
    one-sided static target in sequence slots)."""
    if tgt.mode == "one_sided_static" and tgt.baseline.static_layout == "sequence_slots":
        return SlottedPrefill(spec, rng, registry, block_size=tgt.block_size, **kwargs)
    return PrefillWorkload(spec, rng, registry, **kwargs)


def attach(initiator: Any, gen: Any) -> None:
    """Let a static client place its data where the workload says (sequence slots)."""
    if isinstance(gen, SlottedPrefill) and hasattr(initiator, "placement"):
        initiator.placement = gen.offset_of


def kv_request(spec: WorkloadSpec, req: Request) -> Request:
    """``req`` as issued: a KV-cache LOAD as DIRECT_LOAD (``kvcache.load_with``), an
    ALLOC_STORE as DIRECT_ALLOC (``kvcache.store_with``)."""
    if spec.kind != "kvcache":
        return req
    kv = spec.kvcache
    if req.op == "load" and kv.load_with == "direct_load":
        return replace(req, op="direct_load")
    if req.op == "alloc_store" and kv.store_with == "direct_alloc":
        return replace(req, op="direct_alloc", seal=False)
    return req


__all__ = ["SlottedPrefill", "attach", "kv_request", "prefill_workload"]
