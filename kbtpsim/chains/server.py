"""The offloaded KBTP target as a system node: chains in the NIC, a CPU for the rest.

:class:`OffloadedTargetServer` is a :class:`~kbtpsim.system.server.SoftwareTargetServer`
whose connections pre-post one chain per request credit (:class:`ChainServer`), so the
NIC serves the fast-path variants the profile verifies (``docs/chains.md``) without the
CPU. A target CPU process per connection (:class:`~kbtpsim.system.cpu.TargetCpu`, shared
cores) does what the chains do not:

* polls the connection's ChainServer; a credit the NIC served costs a CQ poll
  (account ``CHAIN``) and, for ALLOC_STORE, ``Target.note_chain_alloc``;
* serves the fallbacks (``needs_cpu``: HELLO, GOODBYE, FREE, BIND, errors, anything the
  profile cannot run) with the memory-backed :class:`~kbtpsim.target.Target` on the same
  memory, charged to the request's opcode exactly as the software server charges it
  (poll + per-op cost + posting). A handed-over allocation (slot not ready) goes to
  ``Target.finish_allocation`` with the chain's ticket;
* carries out the target's effects with the base server's code: the connection QP is
  *managed* (chains hold its WQEs back), so the CPU's work requests are written into the
  served credit's CPU slots (``ChainServer(cpu_slots=)``) and enabled there, ahead of
  the next credit's chain;
* releases the credit's gate once the request no longer waits in the target (deferred
  FREE, allocation waiting for a slot, RDMA Read of a store), setting the later credits'
  session and quota octets first (``_sync_credits``, as ``chains/harness.py``);
* re-posts finished chains in batches of at least ``refill_batch`` (``cpu_post_ns`` per
  WR, one doorbell per batch, account ``REFILL``).

Timeouts, deferred frees, disconnects and DIRECT modes are the base server's. The plan of
a connection is made at :meth:`accept` for the initiator named there (``Initiator``
passes its name); a session established by any other initiator keeps the session octet
clear, so the CPU serves all of it. ADDR_LE: by default the server sets it when the
profile's WQE fields are little-endian (``ideal``), the byte order its chains need.

The CPU process is :class:`~kbtpsim.chains.cpu_loop.ChainCpuLoop`, its serving of
credits :class:`~kbtpsim.chains.serving.CreditServing`; a connection's record is in
:mod:`kbtpsim.chains.chain_conn`, the configuration's reasons and helpers (why a variant
stays on the CPU, :func:`free_on_nic_blockers`, :func:`aligned_table`) in
:mod:`kbtpsim.chains.offload_config`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import simpy

from kbtpsim.chains.chain_conn import _ChainConn, _ConnQp
from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.cpu_loop import ChainCpuLoop
from kbtpsim.chains.cpu_ticket import NicTicketTaker
from kbtpsim.chains.layout import ChainLayout, RingKeys, register_readers, register_ring
from kbtpsim.chains.offload_config import (
    DIRECT_ALLOC_RING,
    FREE_ON_CPU,
    KEPT_ON_CPU,
    UNKNOWN_INITIATOR,
    aligned_table,
    free_on_nic_blockers,
)
from kbtpsim.chains.plan import ConnectionPlan, plan_connection, stages_reads
from kbtpsim.chains.post import ChainServer
from kbtpsim.chains.quiesce import FreeQuiescence
from kbtpsim.chains.recovery import ChainRecovery
from kbtpsim.chains.serving import CHAIN, REFILL, CreditServing
from kbtpsim.chains.v2 import chain_server_class, prepare_chain, recycle_blockers
from kbtpsim.nic import Link, NicProfile, QueuePair, Simulation, connect
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.profiles import get_profile
from kbtpsim.system.server import REQUEST_OVERHEAD, ServerConnection, SoftwareTargetServer, op_name
from kbtpsim.target import Effect, SendMessage, Target, TargetConfig
from kbtpsim.target.config import CounterMode
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.memstore import MemBlockTable, TableMeter
from kbtpsim.wire import Feature


class OffloadedTargetServer(ChainCpuLoop, CreditServing, ChainRecovery, FreeQuiescence,
                            SoftwareTargetServer):
    """A KBTP target whose NIC runs the chains (see the module docstring).

    Arguments as :class:`SoftwareTargetServer`, plus ``refill_batch`` (re-post finished
    chains once at least this many have finished; clamped to 1..credits), ``cpu_slots``
    (CPU work requests per served credit, default 4), ``addr_le`` (None: set ADDR_LE
    when the profile's WQE fields are little-endian), ``variants`` (the fast-path variants
    to offload where they verify; default all) and ``repost_ns`` (CPU ns to re-post one
    WQE of a consumed chain; default the profile's ``cpu_post_ns``). The target's
    structures are bytes the chains work on, in host memory; with
    ``table_in_device_memory`` the block table is in the NIC's device memory instead
    (decision C29), and every entry the CPU reads or writes costs it an MMIO access."""

    def __init__(self, sim: Simulation, config: TargetConfig, *,
                 profile: str | NicProfile = "ideal-be", refill_batch: int = 1,
                 cpu_slots: int = 4, addr_le: bool | None = None,
                 variants: tuple[str, ...] | None = None, repost_ns: float | None = None,
                 chains: str = "v1", quiesce_frees: bool | None = None,
                 chain_recyclers: int | None = None, free_on_nic: bool = False,
                 table_in_device_memory: bool = False, **kw: Any) -> None:
        prof = get_profile(profile) if isinstance(profile, str) else profile
        #: the block table in NIC device memory (decision C29; ``target.table_memory``)
        self.table_in_device_memory = table_in_device_memory
        #: FREE on the NIC (decision C20): the FREE chain, the LOADs' reader counts, and
        #: every Tail ticket through the NIC (the CPU's too: ``tail_via_nic``)
        self.free_on_nic = free_on_nic
        if free_on_nic:
            why = free_on_nic_blockers(chains, prof, config)
            if why:
                raise ValueError("FREE on the NIC (target.operations.free: offload): "
                                 + "; ".join(why))
            config = replace(config, tail_via_nic=True, free_quiesce=True)
        # chains v2's LOADs do not re-read the entry: a freed block goes back to the ring
        # only once no chain may still read it (decision C13). ``quiesce_frees=False``
        # with v2 is a deliberate bug (the mutant v2-no-quiesce)
        quiesce = chains == "v2" if quiesce_frees is None else quiesce_frees
        if config.free_quiesce != quiesce:
            config = replace(config, free_quiesce=quiesce)
        #: LOADs re-read the entry after the data (O3): v1; v2 relies on C13
        self.seqlock = chains != "v2"
        if addr_le is None:
            addr_le = prof.wqe_field_byte_order == "little"
        if config.addr_le != addr_le:
            config = replace(config, addr_le=addr_le)
        if config.table_range is None and config.initiators:
            # an aligned power-of-two table: a chain's handle tests are aligned blocks,
            # and a LOAD block spanning several initiators' ranges must lie in the table
            config = replace(config, table_range=aligned_table(config))
        if config.counter_mode is not CounterMode.MASKED:  # decision O9
            raise ValueError("counter_mode unmasked: the offloaded target's chains take "
                             "Tickets with masked FetchAdds (draft, 'Free-Block Ring')")
        #: the ChainServer class: chains v1 (re-posted) or v2 (re-armed by the NIC)
        self.chain_server_class = chain_server_class(chains)
        self.chains_version = chains
        #: verify v2's transformed chains when posting them (off for mutants, O4)
        self.verify_chains = True
        #: chains v2: a deliberate bug in every slot's recycle plan, or in its advancers'
        #: counts (per-operation dispatch) (mutants), or None
        self.recycle_hook: Any = None
        self.advance_hook: Any = None
        #: a mutant (kbtpsim.oracle): changes each connection's chain as prepared
        #: (after chains v2's lanes and dispatch), before it is posted, unverified
        self.prepared_hook: Any = None
        blockers = recycle_blockers(prof) if chains == "v2" else []
        if blockers:
            raise ValueError(f"target.chains: v2 cannot run on NIC profile {prof.name!r}: "
                             + "; ".join(blockers) + " (use chains: v1)")
        if refill_batch < 1:
            raise ValueError(f"refill_batch must be >= 1, got {refill_batch!r}")
        self.refill_batch = refill_batch
        if chain_recyclers is not None and chain_recyclers < 1:
            raise ValueError(f"chain_recyclers must be >= 1, got {chain_recyclers!r}")
        #: chains v2: recycler QPs per connection (C16; None: RecyclingChainServer.RECYCLERS)
        self.chain_recyclers = chain_recyclers
        self.cpu_slots = cpu_slots
        self.variants = variants
        #: CPU ps to re-post one WQE of a consumed chain (None: the CPU's post cost)
        self.repost_ps = None if repost_ns is None else round(repost_ns * 1000)
        self._chain_conns: dict[int, _ChainConn] = {}
        self._hold: set[int] = set()  #: connections whose next ALLOC_STORE is held
        self._plans: dict[str, ConnectionPlan] = {}
        self._ring_keys: RingKeys | None = None
        #: the CPU's FetchAdds on the shared Head through the NIC, once chains take
        #: Tickets there too (None until then: the CPU's own instant FetchAdd is atomic)
        self._tickets: NicTicketTaker | None = None
        #: requests per KBTP operation: {"LOAD": {"nic": n, "cpu": m}, ...}
        self.served: dict[str, dict[str, int]] = {}
        #: CPU-served LOAD/STORE/ALLOC_STORE per operation and reason (kbtpsim.chains.
        #: dispatch): {"LOAD": {"partial block ...": n, ...}, ...}
        self.fallback_reasons: dict[str, dict[str, int]] = {}
        #: credits of failed connections the CPU took stock of, by what it did with them:
        #: "served before the failure", "allocation", "inline store", "forgotten",
        #: "Read-source store" (decision O5)
        self.salvaged: dict[str, int] = {}
        #: requests the CPU took as soon as they arrived, before their chain ended
        self.before_chain = 0
        #: (connection, credit) -> the reason it was taken early, until it is served
        self._early_reasons: dict[tuple[int, int], str] = {}
        #: log index -> the shared-ring Ticket that entry took (replay(tickets=))
        self.log_tickets: dict[int, int] = {}
        #: handles of LOADs cut by a connection failure (their reader counts ambiguous,
        #: decision C20: ChainRecovery._note_cut_loads)
        self.cut_loads: set[int] = set()
        self._init_quiescence()
        super().__init__(sim, config, profile=prof, **kw)
        assert self.layout is not None
        self.chain_layout = ChainLayout.of(self.layout, self.config)
        self._table_key, self._pool_key = self.chain_layout.register(self.nic)
        #: the LOADs' reader counts in NIC device memory (C20), None without a NIC FREE
        self._readers_key = register_readers(self.nic, self.chain_layout) \
            if free_on_nic else None
        if free_on_nic:  # the FREE chains take Tail tickets: so does the CPU, via its NIC
            self._ring_keys = register_ring(self.nic, self.layout.rings[0])
            self._start_returns(NicTicketTaker(self.nic, self._ring_keys,
                                               self.layout.rings[0].n_slots, "tail"))
        #: C29: the entries the CPU reads and writes in a table in device memory, each an
        #: MMIO access it pays for (ChainCpuLoop._charge_table); None in host memory
        self._table_meter: TableMeter | None = None
        if table_in_device_memory:
            self._table_meter = TableMeter()
            assert isinstance(self.target.table, MemBlockTable)
            self.target.table.meter = self._table_meter
        #: an MMIO read of NIC device memory: a non-posted round trip over PCIe (an
        #: estimate by symmetry with a DMA read, docs/nic-model.md)
        self.mmio_read_ps = round((2 * prof.pcie_latency_ns + prof.nic_mem_ns) * 1000)

    # ================================================================ construction
    def _make_target(self, direct: bool, base_addr: int) -> Target:
        order: ByteOrder = "little" if self.nic.profile.atomic_byte_order == "little" \
            else "big"
        layout = TargetLayout.plan(self.config, base_addr, counter_byte_order=order)
        if self.table_in_device_memory:  # C29: the NIC's Reads of an entry skip PCIe
            layout = replace(layout, table_addr=self.nic.dm_alloc(layout.table_size, 4096))
            layout.check(self.config)
        self.layout = layout
        return Target(self.config, store=self.nic.host.memory, layout=self.layout)

    def plan_for(self, initiator: str) -> ConnectionPlan:
        """The chain a connection of ``initiator`` pre-posts (cached per name): the
        ``variants`` asked for (default all) that verify on the profile. An initiator
        offered DIRECT_ALLOC keeps ALLOC_STORE on the CPU: a DIRECT_ALLOC session
        allocates from its own ring (decision S1), the chains' ring is the shared one."""
        if initiator not in self._plans:
            ini = next((i for i in self.config.initiators if i.name == initiator), None)
            wanted = VARIANTS if self.variants is None else self.variants
            if not self.free_on_nic:
                wanted = tuple(v for v in wanted if v != "free")
            if ini is None:
                wanted = ()
            elif ini.features & Feature.DIRECT_ALLOC:
                wanted = tuple(v for v in wanted if not v.startswith("alloc"))
            plan = plan_connection(
                self.nic.profile, self.config, self.chain_layout,
                initiator if ini is not None else self.config.initiators[0].name,
                tuple(wanted), seqlock=self.seqlock, readers=self.free_on_nic,
                stage_reads=stages_reads(self.chains_version, self.nic.profile,
                                         self.config.block_size))
            for v in VARIANTS:  # nothing left out silently: say why
                if v in wanted or v in plan.software:
                    continue
                if ini is None:
                    plan.software[v] = [UNKNOWN_INITIATOR]
                elif v == "free" and not self.free_on_nic:
                    plan.software[v] = [FREE_ON_CPU]
                elif self.variants is not None and v not in self.variants:
                    plan.software[v] = [KEPT_ON_CPU]
                else:
                    plan.software[v] = [DIRECT_ALLOC_RING]
            self._plans[initiator] = plan
        return self._plans[initiator]

    # ================================================================ connections
    def accept(self, peer: QueuePair, link: Link | None = None, *,
               name: str = "") -> ServerConnection:
        plan = self.plan_for(name)
        ring = None
        if any(v.startswith("alloc") or v == "free" for v in plan.offloaded):
            if self._ring_keys is None:
                assert self.layout is not None
                self._ring_keys = register_ring(self.nic, self.layout.rings[0])
            if self._tickets is None and any(v.startswith("alloc") for v in plan.offloaded):
                # from now on the NIC takes Tickets on Head: so does the CPU (cpu_ticket)
                assert self.layout is not None
                self._tickets = NicTicketTaker(self.nic, self._ring_keys,
                                               self.layout.rings[0].n_slots)
            ring = self._ring_keys
        # one credit per request credit, one for HELLO/GOODBYE, and the refill lag
        credits = self.config.request_credits + self.refill_batch
        cls = self.chain_server_class if plan.offloaded else ChainServer
        chain = prepare_chain(self.chains_version, plan.chain, self.nic.profile,
                              check=self.verify_chains)
        if self.prepared_hook is not None:
            self.prepared_hook(chain)
        extra: dict[str, Any] = {}
        if cls is not ChainServer and self.recycle_hook is not None:
            extra["recycle_hook"] = self.recycle_hook
        if cls is not ChainServer and self.advance_hook is not None:
            extra["advance_hook"] = self.advance_hook
        if cls is not ChainServer and self.chains_version == "v2":
            extra["recyclers"] = self.chain_recyclers  # None: the v2 server's default
        if self._readers_key is not None:
            extra["readers"] = self._readers_key
        chains = cls(self.nic, chain, self.chain_layout, credits, self._table_key,
                     self._pool_key, True, ring, cpu_slots=self.cpu_slots, **extra)
        connect(chains.conn, peer, link)
        conn_id = next(self._conn_ids)
        cc = _ChainConn(conn_id, chains, plan, name)
        conn = ServerConnection(conn_id, _ConnQp(cc),  # type: ignore[arg-type]
                                name or f"conn{chains.conn.qpn}",
                                REQUEST_OVERHEAD + self.config.max_inline)
        cc.conn = conn
        self.connections[conn_id] = conn
        self._chain_conns[conn_id] = cc
        self.log.append(("connect", conn_id, self.sim.now))
        self.target.connect(conn_id, self.sim.now)
        self.env.process(self._chain_cpu(cc))
        return conn

    def chain_server(self, conn: ServerConnection) -> ChainServer:
        """The ChainServer of a connection."""
        return self._chain_conns[conn.conn_id].chains

    def offloaded(self, conn: ServerConnection) -> tuple[str, ...]:
        """The variants the connection's chains serve in the NIC."""
        return self._chain_conns[conn.conn_id].plan.offloaded

    def _translate_send(self, conn: ServerConnection, eff: SendMessage) -> SendMessage:
        if not self.direct:  # no NIC windows: the target's own STags go out as they are
            return eff
        return super()._translate_send(conn, eff)

    # ================================================================ scripted holds
    def hold_next_allocation(self, conn: ServerConnection) -> None:
        """The connection's next request, if an ALLOC_STORE, stalls after taking its ticket
        (``Target.handle(..., hold_after_ticket=True)``) until :meth:`read_slot`: the
        replay's TAKE_TICKET. Call it while the connection is idle (no request in
        flight). The request is served by the CPU: the next credit's ALLOC_STORE
        allowance (quota octet) is withdrawn before its request arrives."""
        cc = self._chain_conns[conn.conn_id]
        cs = cc.chains
        nxt = cs.finished  # the credit the next request lands on (nothing in flight)
        if nxt in cs.live:
            cs.disarm(nxt)
            cc.no_arm.add(nxt)
        self._hold.add(conn.conn_id)

    def read_slot(self, conn: ServerConnection) -> simpy.Process:
        """Process: the held allocation of ``conn`` reads its slot (``Target.read_slot``)
        on a core, and its effects go out. Raises ValueError at once if none is held."""
        effects = self.target.read_slot(conn.conn_id, int(self.env.now))
        self._kick()
        return self.env.process(self.run_on_cpu("ALLOC_STORE", lambda _now: effects))

    def on_request(self, conn: ServerConnection, data: bytes, now: int) -> list[Effect]:
        if conn.conn_id in self._hold and op_name(data) == "ALLOC_STORE":
            self._hold.discard(conn.conn_id)
            conn.received.append(data)
            self.log.append(("handle", conn.conn_id, data, now))
            effects = self.target.handle(conn.conn_id, data, now, hold_after_ticket=True)
            self.note_reads(effects)
            self._kick()
            return effects
        return super().on_request(conn, data, now)

    # ================================================================ reports
    def op_report(self) -> dict[str, dict[str, float]]:
        """Per KBTP operation: requests served by the NIC and by the CPU, the CPU time
        charged to the operation (ns) and per request; plus ``REFILL`` and ``CHAIN``
        (CPU time of re-posting chains and of noticing NIC-served credits)."""
        out: dict[str, dict[str, float]] = {}
        for op in sorted(set(self.served) | {a for a in self.cpu.report()
                                             if a not in (REFILL, CHAIN)}):
            counts = self.served.get(op, {})
            nic, cpu = counts.get("nic", 0), counts.get("cpu", 0)
            busy = self.cpu.busy_ns(op)
            n = nic + cpu or self.cpu.ops(op)
            out[op] = {"nic": float(nic), "cpu": float(cpu), "cpu_ns": busy,
                       "cpu_ns_per_op": busy / n if n else 0.0}
        for acc in (REFILL, CHAIN):
            out[acc] = {"nic": 0.0, "cpu": float(self.cpu.ops(acc)),
                        "cpu_ns": self.cpu.busy_ns(acc),
                        "cpu_ns_per_op": self.cpu.per_op_ns(acc)}
        return out

    def _count(self, op: str, where: str) -> None:
        self.served.setdefault(op, {"nic": 0, "cpu": 0})[where] += 1


#: with the configuration's reasons and helpers (kbtpsim.chains.offload_config) and the
#: connection record (kbtpsim.chains.chain_conn), re-exported
__all__ = [
    "CHAIN",
    "DIRECT_ALLOC_RING",
    "FREE_ON_CPU",
    "KEPT_ON_CPU",
    "REFILL",
    "UNKNOWN_INITIATOR",
    "OffloadedTargetServer",
    "_ChainConn",
    "_ConnQp",
    "aligned_table",
    "free_on_nic_blockers",
]
