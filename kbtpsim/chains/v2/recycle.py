"""The recycling plan of a credit: the work requests that re-arm its chain in place.

A v1 credit is re-posted by the CPU after each request (every WQE encoded and written
again, about 60 ns each). A recycled credit keeps its WQEs in the rings: the NIC runs the
same ring slots again by ENABLEing past each ring's end (MLNX_OFED's
``IBV_EXP_QP_CREATE_IGNORE_SQ_OVERFLOW``, which RedN sets on its QPs; the rings hold
exactly one round of credits). Between two rounds of a credit, the NIC itself:

1. restores the credit's scratch memory (arm words, sentinels) from a pristine image,
   with one loopback RDMA Write;
2. restores every WQE the chain modifies at run time (patch and scatter destinations,
   conditionally patched opcodes, CAS-armed control words, the CPU's slots) from
   pristine copies, one loopback Write per contiguous run of such WQEs;
3. advances every absolute count of the credit's WAIT and ENABLE WQEs with a loopback
   FetchAdd on the WQE's count field: a WAIT compares against the cumulative completion
   count of its CQ and an ENABLE names an absolute send-queue index (mlx5; legacy
   libmlx5 computes a WAIT's count as the CQ's wait index plus the request's count), so
   the next round's values are the current ones plus one round's worth;
4. waits (WAIT on its own CQ) until all of that has completed, then re-arms the receive
   by a FetchAdd on the receive queue's doorbell record (or, where the atomics' byte
   order is not the record's, the CPU re-posts the receive) and ENABLEs the master for
   the next round; then advances its own WAIT and ENABLE counts the same way.

:func:`plan_recycle` builds that list (:class:`RecycleStep`); :func:`check_recycle` is the
verifier rule ``recycle-advanced``: every WAIT or ENABLE of the credit has exactly one
FetchAdd on its count field, by exactly one round's advance, ordered after the WR it
advances when both are on the recycler; every modified WQE is restored; the master
ENABLE comes after the WAIT that covers the restores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

StepKind = Literal["restore_scratch", "restore_wqes", "restore_ctrl", "advance", "wait",
                   "rearm_recv", "enable_master", "nop"]


@dataclass(frozen=True, slots=True)
class CountField:
    """An absolute count in a posted WQE: the WAIT's CQ count or the ENABLE's index."""

    qp: str  #: role of the QP whose ring holds the WQE ("master", "worker", ...)
    index: int  #: the WQE's index (round 0)
    opcode: str  #: "WAIT" or "ENABLE"
    target: str  #: "cq:recv", "cq:chain", "qp:conn", ...
    delta: int  #: what one round adds to it


@dataclass(frozen=True, slots=True)
class RecycleStep:
    """One work request of a credit's recycle segment (on the recycler QP)."""

    kind: StepKind
    about: str
    #: restore_wqes: (qp role, first index, count); restore_scratch: ("scratch", 0, len)
    span: tuple[str, int, int] = ("", 0, 0)
    #: advance: the count it advances (by its delta)
    count: CountField | None = None
    signaled: bool = True
    #: restore_wqes: the span's last WQE is a WAIT/ENABLE whose count is advanced,
    #: restored only up to its count (as ``restore_ctrl`` restores one alone: C31)
    upto_count: bool = False


@dataclass
class RecyclePlan:
    """What re-arms one credit slot (see module docstring)."""

    steps: list[RecycleStep] = field(default_factory=list)
    #: the WAIT/ENABLE counts of the credit's chain WQEs (besides the recycler's own)
    counts: list[CountField] = field(default_factory=list)
    #: (qp role, index) of every chain WQE the chain modifies at run time
    modified: set[tuple[str, int]] = field(default_factory=set)
    #: recycler WQE index of the first step
    base: int = 0

    @property
    def signaled(self) -> int:
        return sum(1 for s in self.steps if s.signaled)

    def describe(self) -> list[str]:
        return [f"{i:2d} {s.kind:15s} {s.about}" for i, s in enumerate(self.steps)]


#: decision C26: the most unmodified WQEs one restore Write spans to join two runs (a
#: WQE's 128 octets cost the loopback Write little, a WR a decode and a transmit; wider
#: joins make long multi-packet Writes that hold the loopback path: cx5's chains, whose
#: lanes are long, got spans of 60 WQEs and a LOAD p99 19 % higher)
MAX_JOIN_GAP = 2


def runs(indices: list[int], keep: frozenset[int] | set[int] = frozenset(),
         max_gap: int = MAX_JOIN_GAP) -> list[tuple[int, int]]:
    """Contiguous runs (first, count) of sorted ``indices``; two runs are joined across
    the at most ``max_gap`` indices between them unless one of those is in ``keep`` (a
    WQE whose count is advanced: a restore would rewind it). A WQE between two restored
    ones that the chain does not modify holds its pristine octets, so restoring it too
    rewrites the same octets, and one loopback Write does what two did (decision
    C26)."""
    out: list[tuple[int, int]] = []
    for i in sorted(indices):
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        elif out and i - (out[-1][0] + out[-1][1]) <= max_gap and \
                not any(j in keep for j in range(out[-1][0] + out[-1][1], i)):
            out[-1] = (out[-1][0], i + 1 - out[-1][0])
        else:
            out.append((i, 1))
    return out


def plan_recycle(counts: list[CountField], modified: set[tuple[str, int]],
                 scratch_len: int, seg_base: int, rec_wait_delta: int,
                 master_enable_delta: int,
                 private: list[CountField] | None = None) -> RecyclePlan:
    """The recycle segment of one credit slot, whose first WR is recycler WQE
    ``seg_base``: restores, count advances, the wait for them, the receive re-arm, the
    master ENABLE, and last the advances of the segment's own WAIT (by
    ``rec_wait_delta``) and ENABLE (by ``master_enable_delta``), after they ran.
    ``private``: the counts the variants' advancers advance (no restore may cover them
    either)."""
    plan = RecyclePlan(counts=list(counts), modified=set(modified), base=seg_base)
    steps = plan.steps
    steps.append(RecycleStep("restore_scratch", "scratch (arm words, sentinels) <- pristine",
                             ("scratch", 0, scratch_len)))
    counted = {(c.qp, c.index) for c in counts}
    every_count = counted | {(c.qp, c.index) for c in private or ()}
    by_qp: dict[str, list[int]] = {}
    for qp, idx in modified - every_count:
        by_qp.setdefault(qp, []).append(idx)
    # a CAS-armed WAIT/ENABLE (cx5), or one whose condition's mask a patch frees (C21):
    # all before its advanced count, at the end of a run it follows (C31), else alone
    ctrl = sorted(modified & every_count)
    for qp in sorted(by_qp):
        keep = {idx for q, idx in every_count if q == qp}
        for first, n in runs(by_qp[qp], keep):
            end = first + n
            tail = next((i for q, i in ctrl if q == qp and end <= i <= end + MAX_JOIN_GAP
                         and not any(j in keep for j in range(end, i))), None)
            if tail is None:
                steps.append(RecycleStep("restore_wqes", f"{qp} WQEs {first}..{end - 1} "
                                         "<- pristine", (qp, first, n)))
                continue
            ctrl.remove((qp, tail))
            steps.append(RecycleStep("restore_wqes", f"{qp} WQEs {first}..{tail} <- "
                                     f"pristine, WQE {tail} up to its count (advanced)",
                                     (qp, first, tail + 1 - first), upto_count=True))
    for qp, idx in ctrl:
        steps.append(RecycleStep("restore_ctrl", f"{qp} WQE {idx} up to its count <- "
                                 "pristine (control and condition segments; its count is "
                                 "advanced)", (qp, idx, 1)))
    for c in counts:
        steps.append(RecycleStep("advance", f"{c.qp}#{c.index} {c.opcode} {c.target} "
                                 f"count += {c.delta}", count=c))
    wait_at = seg_base + len(steps)
    steps.append(RecycleStep("wait", "WAIT recycler CQ: the restores and advances above "
                             "completed", signaled=False))
    steps.append(RecycleStep("rearm_recv", "receive doorbell record += 1 (the credit's "
                             "receive runs again)"))
    enable_at = seg_base + len(steps)
    steps.append(RecycleStep("enable_master", "ENABLE master through the next round of "
                             "this credit", signaled=False))
    for at, op, target, delta in ((wait_at, "WAIT", "cq:recycler", rec_wait_delta),
                                  (enable_at, "ENABLE", "qp:master", master_enable_delta)):
        c = CountField("recycler", at, op, target, delta)
        steps.append(RecycleStep("advance", f"recycler#{at} {op} {target} count += "
                                 f"{delta} (after it ran)", count=c))
    return plan


def own_counts(plan: RecyclePlan, seg_base: int, rec_wait_delta: int,
               master_enable_delta: int) -> list[CountField]:
    """The recycler's own WAIT and ENABLE of ``plan`` with the advance each needs."""
    out = []
    for i, s in enumerate(plan.steps):
        if s.kind == "wait":
            out.append(CountField("recycler", seg_base + i, "WAIT", "cq:recycler",
                                  rec_wait_delta))
        elif s.kind == "enable_master":
            out.append(CountField("recycler", seg_base + i, "ENABLE", "qp:master",
                                  master_enable_delta))
    return out


def check_recycle(plan: RecyclePlan, chain_counts: list[CountField],
                  chain_modified: set[tuple[str, int]],
                  private: list[CountField] | None = None) -> list[str]:
    """Verifier rule ``recycle-advanced`` (module docstring): findings, empty if sound.

    ``chain_counts`` are the credit's WAIT/ENABLE WQEs with the advance each needs per
    round, ``chain_modified`` the WQEs its chain modifies, both as posted; ``private``
    the counts the variants' advancers advance, which no restore may rewrite either."""
    out: list[str] = []
    advanced: dict[tuple[str, int], list[RecycleStep]] = {}
    for s in plan.steps:
        if s.kind == "advance" and s.count is not None:
            advanced.setdefault((s.count.qp, s.count.index), []).append(s)
    for c in chain_counts:
        got = advanced.pop((c.qp, c.index), [])
        if not got:
            out.append(f"recycle-advanced: {c.qp}#{c.index} {c.opcode} {c.target}: its "
                       "count is never advanced (the next round's WAIT passes at once or "
                       "its ENABLE stops short)")
        elif len(got) > 1:
            out.append(f"recycle-advanced: {c.qp}#{c.index} advanced {len(got)} times a "
                       "round")
        elif got[0].count is not None and got[0].count.delta != c.delta:
            out.append(f"recycle-advanced: {c.qp}#{c.index} {c.opcode} {c.target}: "
                       f"advanced by {got[0].count.delta}, one round is {c.delta}")
    for (qp, idx), _ in advanced.items():
        out.append(f"recycle-advanced: {qp}#{idx}: advanced, but it is no count of the "
                   "credit")
    restored: set[tuple[str, int]] = set()
    counted = {(c.qp, c.index) for c in (*chain_counts, *(private or ()))}
    for s in plan.steps:
        if s.kind in ("restore_wqes", "restore_ctrl"):
            qp, first, n = s.span
            restored.update((qp, i) for i in range(first, first + n))
        if s.kind == "restore_wqes" and any((s.span[0], i) in counted
                                            for i in range(s.span[1], s.span[1] + s.span[2]
                                                           - s.upto_count)):
            out.append(f"recycle-advanced: {s.about} rewrites a WAIT/ENABLE count with "
                       "its round-0 value")
    for qp, idx in sorted(chain_modified - restored):
        out.append(f"recycle-restored: {qp}#{idx} is modified by the chain and never "
                   "restored (the next round starts from this round's values)")
    for i, s in enumerate(plan.steps):
        c = s.count
        if s.kind == "advance" and c is not None and c.qp == "recycler":
            own = c.index - plan.base  # the position of the WR it advances
            if own > i:
                out.append(f"recycle-order: recycler#{c.index} is advanced before it runs "
                           "(it would wait for, or enable, the round after next)")
    kinds = [s.kind for s in plan.steps]
    if "restore_scratch" not in kinds:
        out.append("recycle-restored: the credit's scratch (arm words) is never restored")
    if "enable_master" not in kinds:
        out.append("recycle-order: the master is never ENABLEd for the next round")
    elif "wait" not in kinds or kinds.index("wait") > kinds.index("enable_master"):
        out.append("recycle-order: the master is ENABLEd before the restores and advances "
                   "completed (a WAIT of the next round could see a stale count)")
    else:
        w = kinds.index("wait")
        late = [s for s in plan.steps[w:] if s.kind in ("restore_scratch", "restore_wqes",
                                                       "restore_ctrl")
                or (s.kind == "advance" and s.count is not None
                    and s.count.qp != "recycler")]
        if late:
            out.append(f"recycle-order: {late[0].about} comes after the WAIT that should "
                       "cover it")
        if "rearm_recv" in kinds and kinds.index("rearm_recv") < w:
            out.append("recycle-order: the receive is re-armed before the scratch it "
                       "scatters into is restored")
    return out

