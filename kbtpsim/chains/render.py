"""Text listings, drawings and explanations of chains (what ``kbtpsim chains`` prints)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Chain, EdgeKind, Role, WrTemplate
from kbtpsim.chains.plan import Decision

#: Per variant: (validation, where, why). "chain" = enforced by the NIC; "CPU" = the request
#: goes to the target CPU, which answers exactly as the software target.
VALIDATIONS: dict[str, list[tuple[str, str, str]]] = {
    "load": [
        ("version, opcode, Status 0, flags", "chain",
         "marker on request octets 0..3 and 22..23 (ALLOW_UNSEALED, INVALIDATE free); "
         "RECORD, unknown bits -> CPU"),
        ("INVALIDATE", "chain",
         "Send with Invalidate of the DD STag: the key patched from the request, the opcode "
         "by a patch conditional on the Flags (decision C9)"),
        ("handle range (readable)", "chain + CPU",
         "marker: handle in the largest aligned power-of-two block of the trust domain's "
         "ranges; other handles -> CPU (INVALID_HANDLE or served there)"),
        ("VALID", "chain", "entry markers: Flags = VALID|SEALED, or VALID alone "
         "(ALLOW_UNSEALED)"),
        ("SEALED / ALLOW_UNSEALED", "chain",
         "sealed entries in chain; an unsealed entry in chain with ALLOW_UNSEALED: a second "
         "entry marker (Flags = VALID) arms the LOAD only if a patch conditional on that "
         "flag gave it the first marker's arm-word octet (decision C10); without the flag "
         "-> CPU (NOT_SEALED)"),
        ("Generation", "chain + CPU",
         "Generation 0 (any) in chain; non-zero -> CPU (a compare operand placed from the "
         "request serves one conditional WR only: one source, one destination)"),
        ("Data Length <= descriptor Length", "chain + CPU",
         "chain requires Data Length = descriptor Length = Block Size (conditions test "
         "equality; Data Length is big-endian and cannot be a WR length on LE WQEs); "
         "other lengths -> CPU"),
    ],
    "store_inline": [
        ("version, opcode, Status 0, flags", "chain",
         "INLINE [| SEAL] only; INVALIDATE, RECORD, unknown bits -> CPU"),
        ("handle range (own)", "chain + CPU", "aligned block of the own range; rest -> CPU"),
        ("VALID, not SEALED", "chain", "entry marker: Flags = VALID"),
        ("Generation", "chain + CPU", "0 in chain; non-zero -> CPU"),
        ("inline length <= Max Inline, <= Block Size; STag/TO 0 (D7)", "chain + CPU",
         "chain requires Length = Block Size <= Max Inline and STag = TO = 0; rest -> CPU"),
        ("SEAL", "chain", "new Flags = request Flags octets (INLINE|SEAL = VALID|SEALED)"),
    ],
    "store_read": [
        ("version, opcode, Status 0, flags", "chain",
         "flags 0 [| SEAL] [| INVALIDATE]; RECORD, unknown bits -> CPU"),
        ("INVALIDATE", "chain",
         "Send with Invalidate of the DD STag (key and opcode patched, decision C9)"),
        ("handle range (own)", "chain + CPU", "aligned block of the own range; rest -> CPU"),
        ("VALID, not SEALED", "chain", "entry marker: Flags = VALID"),
        ("Generation", "chain + CPU", "0 in chain; non-zero -> CPU"),
        ("Length <= Block Size", "chain + CPU", "chain requires Length = Block Size"),
        ("SEAL", "chain",
         "new Flags VALID or VALID|SEALED, written in step 1 by one of two Writes "
         "conditional on the request's SEAL bit, gathered by the entry update after the "
         "data (decision C10)"),
    ],
    "alloc_inline": [
        ("version, opcode, Status 0, flags", "chain",
         "INLINE [| SEAL] (inline), flags 0 [| SEAL] [| INVALIDATE] (Read source, "
         "decisions C9, C10); INVALIDATE with INLINE, RECORD, unknown bits -> CPU"),
        ("handle range (own)", "chain + CPU", "aligned block of the own range; rest -> CPU"),
        ("not VALID (ALREADY_BOUND)", "chain", "entry marker: Flags = 0"),
        ("Generation", "chain + CPU", "0 in chain; non-zero -> CPU"),
        ("length <= Block Size (<= Max Inline)", "chain + CPU",
         "chain requires Length = Block Size (STag = TO = 0 inline); rest -> CPU"),
        ("quota (NO_SPACE)", "CPU accounting",
         "the CPU sets the quota octet in at most quota - usage credits (at refill, and "
         "re-checks later credits after serving a request); others hand ALLOC_STORE to "
         "the CPU, which answers NO_SPACE or allocates in software"),
        ("ring Sequence = Ticket", "chain + CPU",
         "marker comparing the slot's Sequence with the FetchAdd's Ticket (a placed "
         "operand); slot not ready -> CPU with that ticket (Target.finish_allocation), "
         "counted"),
        ("Generation + 1 (skip 0)", "chain",
         "masked FetchAdd on the big-endian entry word (Flags += request INLINE|SEAL = "
         "VALID|SEALED) and a conditional second add when the old Generation was 0xFFFF"),
    ],
}
VALIDATIONS["alloc_read"] = list(VALIDATIONS["alloc_inline"])
VALIDATIONS["alloc_read"][-1] = (
    "Generation + 1 (skip 0), SEAL", "chain",
    "masked FetchAdd on the big-endian entry word (Flags += VALID, or VALID|SEALED: a patch "
    "of its Add Data conditional on the request's SEAL bit, decision C10) and a "
    "conditional second add when the old Generation was 0xFFFF")
VALIDATIONS["free"] = [
    ("version, opcode, Status 0, flags", "chain + CPU",
     "marker on request octets 0..3 and 22..23: Flags 0 only; RECORD, unknown bits -> CPU"),
    ("handle range (own)", "chain + CPU", "aligned block of the own range; rest -> CPU"),
    ("VALID", "chain + CPU", "entry markers: Flags VALID|SEALED or VALID (one unbind per "
     "value); anything else -> CPU (NOT_VALID)"),
    ("Generation", "chain + CPU", "Generation 0 (any) in chain; non-zero -> CPU"),
    ("Generation + 1 (skip 0)", "chain + CPU",
     "masked FetchAdd on the big-endian entry word (Flags to 0, Generation + 1); an "
     "entry at 0xFFFF -> CPU before the unbind (decision C20)"),
    ("no LOAD reads the block (decision C13)", "chain + CPU",
     "the handle's reader count (every LOAD's FetchAdd + 1 before its entry Read, - 1 "
     "after its data Write) read after the unbind on its QP; counted readers -> CPU, "
     "which waits for them (decision C20)"),
    ("slot consumed before it is written (deferred free)", "chain + CPU",
     "masked FetchAdd on Tail, the slot's Block Offset read: all ones (consumed) -> Block "
     "Offset, then Sequence, written; otherwise -> CPU with the ticket"),
]
MSG_ROW = ("message length (octet count)", "chain + CPU",
           "marker on the receive CQE's byte count (receive CQ buffer in memory): exactly "
           "40 (+ Block Size inline) octets in chain; trailing, short or long data -> CPU "
           "(MALFORMED there)")
SESSION_ROW = ("session established (HELLO done, no GOODBYE)", "chain",
               "session octet of the entry Read's arm word, set by the CPU; outside a "
               "session -> CPU (MALFORMED there)")
for _rows in VALIDATIONS.values():
    _rows += [MSG_ROW, SESSION_ROW]
#: What the chain design still cannot do like the software target (listed, never silent).
LIMITS = [
    "a request longer than the credit's receive buffer (40 + Max Inline + 16 octets) fails "
    "the receive (LOC_LEN_ERR) and the connection, with or without chains; the software "
    "target, fed the octets directly, answers it (TOO_LARGE or MALFORMED)",
]


#: How each lowering expresses the chain's conditions (``explain``).
LOWERINGS = {
    "native": "conditions: native conditional WRs (each WR tests an 8-octet window under "
              "a mask)",
    "cas": "conditions: CAS-on-WQE (RedN, decision C5): each conditional WR is posted "
           "disarmed (a NOP); a loopback Write copies the window's compared octets into "
           "its control word, a masked CAS swaps the live control word in if they match "
           "(two CASes for 8 compared octets), and the WR is held back (WAIT/ENABLE) "
           "until the CAS has landed",
}


def source_text(wr: WrTemplate) -> str:
    parts = [f"{k}={v.describe()}" for k, v in wr.fields.items()]
    if wr.disarmed:
        parts.insert(0, "posted disarmed (NOP)")
    if wr.cas_cond is not None:
        parts.insert(0, f"arms {wr.arms} if[{wr.cas_cond.about}]")
    if wr.inline is not None:
        parts.append(f"inline={wr.inline.hex()}")
    for rd in wr.gather:
        prod = f" <- {','.join(rd.producers)}" if rd.producers else ""
        parts.append(f"gather {rd.loc}[{rd.length}] ({rd.about}){prod}")
    for p in wr.places:
        parts.append(f"place {p.length}B -> {p.dest}{'+' + str(p.offset) if p.offset else ''}"
                     f" ({p.what}, {p.order})")
    return "; ".join(parts)


def listing(chain: Chain) -> list[str]:
    """One line per WR: step, queue, name, opcode, condition, field sources."""
    lines = []
    for w in chain.wrs():
        sig = " S" if w.signaled else ""
        cond = f" if[{w.cond.about}]" if w.cond is not None else ""
        queue = f"{w.role.value}@{w.lane}" if w.lane else w.role.value
        lines.append(f"{w.step:>2} {queue:<6} {w.name:<20} {w.label:<16}{sig}{cond}"
                     f"  {source_text(w)}")
    return lines


def _caps(ch: Chain) -> list[str]:
    """The chain's capabilities, the table key named for what provides it: a stride-256
    key, an interleaved UMR key (``indirect_keys``) or the hypothetical ``strided_keys``."""
    return ["table key (indirect_keys or strided_keys)" if c == "strided_keys" else c
            for c in ch.capabilities()]


def show(decision: Decision) -> str:
    ch = decision.chain
    v = VARIANTS[decision.variant]
    out = [
        f"chain {decision.variant}: {v.about}",
        f"profile {decision.profile}, ADDR_LE {'on' if decision.addr_le else 'off'}: "
        + ("OFFLOADED" if decision.offloaded else "SOFTWARE (chain rejected, see below)"),
        f"work requests: {ch.count()} ({ch.count(include_master=False)} without the "
        f"master's WAIT/ENABLE), capabilities: {', '.join(_caps(ch))}",
    ]
    out += listing(ch)
    if not decision.offloaded:
        out.append("rejected:")
        out += [f"  {r}" for r in decision.reasons()]
    return "\n".join(out)


#: Per blocking capability: what provides it on real hardware (what would unblock it).
UNBLOCK: dict[str, str] = {
    "wait_enable": "cross-channel WAIT/ENABLE and managed QPs: MLNX_OFED 4.x experimental "
    "verbs (IBV_EXP_WR_CQE_WAIT, IBV_EXP_WR_SEND_ENABLE/RECV_ENABLE; QP flags "
    "CROSS_CHANNEL, MANAGED_SEND, MANAGED_RECV, IGNORE_SQ_OVERFLOW), or on upstream a "
    "DEVX-created QP with the firmware's cd_master / cd_slave_send / cd_slave_receive "
    "QPC bits (mlx5_ifc.h) and hand-written WQEs (opcodes 0x0f, 0x16, 0x17): profile cx5",
    "masked_atomics": "masked (extended) atomics: MLNX_OFED 4.x "
    "IBV_EXP_WR_EXT_MASKED_ATOMIC_CMP_AND_SWP / _FETCH_AND_ADD, or on upstream hand-written "
    "WQEs with opcode 0x14/0x15 and struct mlx5_wqe_masked_atomic_seg (providers/mlx5/"
    "wqe.h; no ibv_wr_* builder): profile cx5",
    "wqe_checks": "firmware WQE checks off: RedN's conf/disable_wqe_checks.sh (mcra writes "
    "on ConnectX-5/6; not a supported setting): profile cx5",
    "indirect_keys": "an interleaved key that starts at TO Table Base Handle << 8: the "
    "MLNX_OFED 4.x UMR (IBV_EXP_WR_UMR_FILL, repeat block, base_addr = start): profile "
    "cx5; or a table whose first handle is 0 (then a zero-based mlx5dv key fits)",
    "native_conditional": "conditional WRs: no shipping NIC has them (hypothetical: "
    "profiles ideal, ideal-be); ConnectX uses CAS-on-WQE instead (decision C5)",
    "cas_on_wqe": "an atomic on a send ring's WQE: the ring registered for REMOTE_ATOMIC "
    "(a plain ibv_reg_mr of the ring buffer) with WQE checks off: profile cx5",
    "strided_keys": "hypothetical strided keys (profile suffix +strided), or an "
    "interleaved UMR key (indirect_keys='exp_umr'): profile cx5",
    "loopback": "a loopback RC QP (QP connected to itself / the same port)",
}


def blocking(d: Decision) -> list[str]:
    """The capability names the decision's violations need (in order, once each)."""
    caps: list[str] = []
    for v in d.violations:
        if v.rule != "capability":
            continue
        m = re.search(r"needs '(\w+)'", v.message)
        cap = m.group(1) if m else ("wqe_checks" if "'wqe_checks'" in v.message else
                                    "indirect_keys" if "indirect_keys" in v.message else "")
        if cap and cap not in caps:
            caps.append(cap)
    return caps


def _key_line(d: Decision) -> str:
    """How the table key is built on the decision's profile (a UMR key: its layout, the
    UMR WQE's size and setup cost, the translation cost per access), or ""."""
    from kbtpsim.nic.keys import KeyLayoutError, plan_table_key, umr_cost
    from kbtpsim.nic.profiles import get_profile

    try:
        prof = get_profile(d.profile)
    except ValueError:
        return ""
    if prof.strided_keys or prof.indirect_keys != "exp_umr":
        return ""
    try:
        plan = plan_table_key(prof.indirect_keys, 0x4000, 256)
    except KeyLayoutError as exc:  # pragma: no cover - the example table always fits
        return f"table key: {exc}"
    cost = umr_cost(prof, plan.layout)
    return (f"table key: interleaved UMR key (per handle a 16-octet entry + a 240-octet "
            f"filler, starting at TO Table Base Handle << 8), built once by a "
            f"{cost.wqe_octets}-octet UMR WQE: {cost.cpu_ns:.0f} ns CPU, "
            f"{cost.nic_ps / 1000:.0f} ns NIC (umr_cycles an estimate); "
            f"+{prof.indirect_xlat_ns:g} ns per access (indirect_xlat_ns, an estimate)")


def explain(decisions: list[Decision]) -> str:
    out = []
    for d in decisions:
        v = VARIANTS[d.variant]
        out.append(f"{d.variant} ({v.about}) on {d.profile}, ADDR_LE "
                   f"{'on' if d.addr_le else 'off'}: "
                   + ("offloaded to the NIC" if d.offloaded else
                      "SOFTWARE: every such request is processed by the target CPU"))
        out.append(f"  {LOWERINGS[d.lowering]}")
        if d.offloaded and any(p.dest == "buf:rstg" for w in d.chain.wrs()
                               for p in w.places):
            out.append("  the data Read lands in the credit's staging buffer; a marker on "
                       "the Read's CQE, then a loopback Write copies it into the block "
                       "(a Read source of several packets, chains v2: decision C24)")
        if not d.offloaded:
            out.append("  why:")
            out += [f"    {r}" for r in d.reasons()]
            caps = blocking(d)
            if caps:
                out.append("  what would unblock it:")
                out += [f"    {c}: {UNBLOCK.get(c, '(no known provider)')}" for c in caps]
        out.append("  validations:")
        for what, where, why in VALIDATIONS[d.variant]:
            where = where if d.offloaded else "CPU"
            out.append(f"    {what:<44} {where:<16} {why if d.offloaded else '(software)'}")
        keys = _key_line(d)
        if keys:
            out.append(f"  {keys}")
        if d.offloaded:
            out.append("  known limits:")
            out += [f"    {x}" for x in LIMITS]
    return "\n".join(out)


_COLOURS = {Role.RECV: "#8dd3c7", Role.MASTER: "#d9d9d9", Role.WORKER: "#80b1d3",
            Role.CONN: "#fdb462", Role.GATE: "#bebada"}
_STYLES: dict[EdgeKind, tuple[str, Literal["solid", "dotted", "dashed"]]] = {
    EdgeKind.COMPLETION: ("tab:red", "solid"), EdgeKind.ENABLE: ("tab:green", "solid"),
    EdgeKind.QP_ORDER: ("0.6", "dotted"), EdgeKind.FENCE: ("tab:purple", "dashed")}


#: savefig metadata that would stamp the file with the date or matplotlib's version
_NO_STAMP: dict[str, dict[str, None]] = {
    ".png": {"Software": None},
    ".svg": {"Date": None, "Creator": None},
    ".pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}


def draw(chain: Chain, path: str, title: str) -> None:
    """Draw the chain (steps left to right, one row band per queue) to ``path`` (PNG, or
    the type its extension names). The file depends only on the chain and the title: no
    date, no matplotlib version, fixed SVG ids (``--docs`` regenerates byte-identically)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kbtpsim"
    import matplotlib.pyplot as plt
    import networkx as nx

    g = chain.graph
    rows: dict[tuple[int, Role], int] = {}
    pos = {}
    band = {Role.RECV: 0, Role.MASTER: 1, Role.WORKER: 2, Role.CONN: 3, Role.GATE: 4}
    for w in chain.wrs():
        key = (w.step if w.step < 99 else max(x.step for x in chain.wrs() if x.step < 99) + 1,
               w.role)
        k = rows.get(key, 0)
        rows[key] = k + 1
        dx = 0.0
        if w.role is Role.MASTER and w.step > 0:  # ENABLE before the step, WAIT after it
            dx = -1.0 if w.opcode is not None and w.opcode.name == "ENABLE" else 1.0
        pos[w.name] = (key[0] * 3.0 + dx, -band[w.role] * 6.0 - k * 0.8)
    width = max(8.0, 1.6 * (max(p[0] for p in pos.values()) / 3 + 1))
    fig, ax = plt.subplots(figsize=(width, 12))
    for kind, (colour, style) in _STYLES.items():
        edges = [(a, b) for a, b, d in g.edges(data=True) if d["kind"] is kind]
        nx.draw_networkx_edges(g, pos, edgelist=edges, edge_color=colour, style=style,
                               ax=ax, arrows=True, arrowsize=8, width=0.8)
    colours = [_COLOURS[g.nodes[n]["wr"].role] for n in g.nodes]
    nx.draw_networkx_nodes(g, pos, node_color=colours, node_size=260, ax=ax)
    labels = {n: f"{n}\n{g.nodes[n]['wr'].label}" for n in g.nodes}
    nx.draw_networkx_labels(g, pos, labels, font_size=5, ax=ax)
    from matplotlib.lines import Line2D

    handles = [Line2D([0], [0], color=c, linestyle=st, label=k.value)
               for k, (c, st) in _STYLES.items()]
    handles += [Line2D([0], [0], marker="o", color="w", markerfacecolor=c, markersize=8,
                       label=f"{r.value} QP") for r, c in _COLOURS.items()]
    ax.legend(handles=handles, loc="upper right", fontsize=7)
    ax.set_title(title)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=130, metadata=_NO_STAMP.get(Path(path).suffix.lower(), {}))
    plt.close(fig)
