"""The verifier's rules on how data lands: ``placement`` (decision O7: a loopback
Write's CQE must imply its placement), ``torn-read`` (decision O5: an initiator's
data Read into a block fits one packet) and ``staged-read`` (decision C24: data read into
staging moves into a block only behind a test that its Read completed)."""

from __future__ import annotations

from kbtpsim.chains.ir import Chain, WrTemplate
from kbtpsim.chains.lowering import CCQE, RSTG
from kbtpsim.chains.violation import Violation
from kbtpsim.nic.cq import CQE_OP_OWN, CQE_REQ
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.wqe import Opcode


def _check_placement(chain: Chain, profile: NicProfile, out: list[Violation]) -> None:
    """Rule ``placement`` (decision O7): the chains make a patch's or marker's octets
    visible by WAITing for its Write's CQE, which holds where a Write's completion implies
    its placement (InfiniBand, RoCE: ``placement="in_order"``). Under RDMAP placement (RFC
    5040 section 5.5, rules 3 and 9) it does not: a later WR may read the old octets."""
    if profile.placement != "rdmap":
        return
    for wr in chain.wrs():
        if wr.opcode is Opcode.RDMA_WRITE and wr.remote_kind == "loopback":
            out.append(Violation(
                wr.name, "placement", "placement",
                "RDMAP placement: a loopback Write's completion does not imply its data "
                "is placed (RFC 5040 rules 3, 9), so the WAIT that counts it does not make "
                "it visible to the WRs it releases (decision O7)"))
            return


def _check_torn_reads(chain: Chain, profile: NicProfile, out: list[Violation]) -> None:
    """Rule ``torn-read`` (decision O5): an initiator's data Read into a block fits one
    packet, so a connection failure either places all of it or none."""
    for wr in chain.wrs():
        if wr.opcode is not Opcode.RDMA_READ or wr.remote_kind != "initiator":
            continue
        for place in wr.places:
            if place.dest == "pool" and place.length > profile.mtu:
                out.append(Violation(
                    wr.name, "places", "torn-read",
                    f"reads the initiator's {place.length} octets straight into the block "
                    f"in {-(-place.length // profile.mtu)} packets of at most "
                    f"{profile.mtu} (mtu): a connection failure can cut it after part "
                    "landed, and nothing can restore the block's old octets (decision "
                    "O5); the CPU serves such a store, staging its Read"))


def _check_staged_reads(chain: Chain, out: list[Violation]) -> None:
    """Rule ``staged-read`` (decision C24): a WR that moves octets from the staging buffer
    of a Read-source store (``buf:rstg``) into target memory runs only if the Read that
    staged them completed: its condition reads an arm word among whose producers is a
    marker testing that Read's own CQE (``buf:ccqe_READ``). A flushed Read's CQE
    satisfies the WAITs behind it as a completed one does; only its CQE tells them
    apart, and a copy of a partly read staging buffer would leave the block torn."""
    by_name = {w.name: w for w in chain.wrs()}
    for wr in chain.wrs():
        staged = [r for r in wr.gather if r.loc == f"buf:{RSTG}"]
        if not staged:
            continue
        reads = {p for r in staged for p in r.producers}
        producers = wr.cond.word.producers if wr.cond is not None else ()
        tested = {_cqe_tested(by_name[p]) for p in producers if p in by_name}
        missing = sorted(reads - tested)
        if missing:
            out.append(Violation(
                wr.name, "cond", "staged-read",
                f"moves the octets {', '.join(missing)} staged without testing that "
                f"Read's CQE first: a connection failure that cuts the Read leaves a "
                "partly read staging buffer, and a flushed CQE satisfies the WAITs too "
                "(decision C24)"))


def _cqe_tested(wr: WrTemplate) -> str | None:
    """The connection WR whose CQE (``buf:ccqe_WR``) ``wr`` tests to be a requester's
    completion (the opcode nibble of its last octet ``CQE_REQ``), or None."""
    c = wr.cond
    head, _, off = c.word.loc.partition("+") if c is not None else ("", "", "")
    if c is None or not head.startswith(f"buf:{CCQE}_") or off != str(CQE_OP_OWN - 7) \
            or c.mask[7] & 0xF0 != 0xF0 or c.compare[7] & 0xF0 != CQE_REQ << 4:
        return None
    return head[len(f"buf:{CCQE}_"):]
