"""The verifier's rules on how data lands: ``placement`` (decision O7: a loopback
Write's CQE must imply its placement) and ``torn-read`` (decision O5: an initiator's
data Read into a block fits one packet)."""

from __future__ import annotations

from kbtpsim.chains.ir import Chain
from kbtpsim.chains.violation import Violation
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
