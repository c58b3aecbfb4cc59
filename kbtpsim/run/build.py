"""Build the simulated system of a scenario with :mod:`kbtpsim.system`.

Targets are :class:`~kbtpsim.system.SoftwareTargetServer` s, initiators
:class:`~kbtpsim.system.Initiator` s, all on one :class:`~kbtpsim.nic.Simulation`.

Network: a networkx graph of hosts and switches (default: a star, every host on one
switch). An initiator reaches its target by the lowest-latency path; its connection's
:class:`~kbtpsim.nic.Link` has that path's latency (links plus switches) and serialises
on the target's access link, shared by every connection that enters the target through
it (the bottleneck of a many-to-one workload). Initiators' own uplinks are not separately
serialised (the same approximation as :class:`kbtpsim.system.Cluster`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from kbtpsim.nic import Link, NicProfile, Simulation, Tracer
from kbtpsim.nic.units import Unit
from kbtpsim.scenario.schema import (
    BASELINE_MODES,
    CHAIN_OPS,
    ExpandedInitiator,
    Scenario,
    SchemaRuleError,
    TargetSpec,
    chain_design,
    nic_profile,
    refill_batch,
)
from kbtpsim.system import CpuCosts, Initiator, SoftwareTargetServer
from kbtpsim.system.contention import Background
from kbtpsim.target import Binding, CounterMode, InitiatorConfig, TargetConfig
from kbtpsim.units import PS_PER_MS
from kbtpsim.wire import Feature

HANDLE_ALIGN = 0x1000
DEFAULT_SWITCH = "switch"


@dataclass
class Port:
    """A target's access link: two shared serialisers (to and from the target)."""

    name: str
    gbps: float
    egress: Unit  #: target -> network
    ingress: Unit  #: network -> target
    #: the port's link (a_to_b: egress); connections use ``link.branch(...)``
    link: Link | None = None


@dataclass
class System:
    scenario: Scenario
    sim: Simulation
    servers: dict[str, SoftwareTargetServer]
    configs: dict[str, TargetConfig]
    initiators: dict[str, Initiator]
    expanded: dict[str, ExpandedInitiator]
    graph: nx.Graph
    ports: dict[str, Port] = field(default_factory=dict)
    paths: dict[str, list[str]] = field(default_factory=dict)

    @property
    def env(self) -> Any:
        return self.sim.env


def target_path(sc: Scenario, name: str) -> str:
    for i, t in enumerate(sc.targets):
        if t.name == name:
            return "target" if i == 0 else f"additional_targets[{i - 1}]"
    return "target"


def offered_features(tgt: TargetSpec) -> Feature:
    f = Feature(0)
    if tgt.features.direct_load:
        f |= Feature.DIRECT_LOAD
    if tgt.features.direct_alloc or tgt.rings == "per_initiator":
        f |= Feature.DIRECT_ALLOC
    if tgt.features.record_completion:
        f |= Feature.RECORD_COMPLETION
    return f


def requested_features(e: ExpandedInitiator, tgt: TargetSpec) -> Feature:
    f = Feature(0)
    for name, flag in (("direct_load", Feature.DIRECT_LOAD),
                       ("direct_alloc", Feature.DIRECT_ALLOC),
                       ("record_completion", Feature.RECORD_COMPLETION)):
        asked = getattr(e.spec.features, name)
        if asked is None:
            asked = getattr(tgt.features, name)
        if asked:
            f |= flag
    if addr_le(tgt):
        f |= Feature.ADDR_LE
    return f


def addr_le(tgt: TargetSpec) -> bool:
    """The target's ADDR_LE: as set, else (null) the byte order of the target NIC's WQE
    fields in offload mode (the order its chains need, docs/chains.md) and off in
    software mode."""
    if tgt.features.addr_le is not None:
        return tgt.features.addr_le
    if tgt.mode != "offload":
        return False
    return bool(nic_profile(tgt.nic, "target.nic").wqe_field_byte_order == "little")


def initiator_buffers(e: ExpandedInitiator, tgt: TargetSpec) -> int:
    """Bytes of an initiator's registered buffer region (see ``initiators[].buffers``)."""
    if e.spec.buffers is not None:
        return e.spec.buffers
    need = 4 * (tgt.request_credits + e.spec.workload.window) * tgt.block_size + (1 << 20)
    return max(16 << 20, min(need, 256 << 20))


def target_configs(sc: Scenario) -> tuple[dict[str, TargetConfig],
                                          dict[str, ExpandedInitiator]]:
    """One :class:`TargetConfig` per target, and the expanded initiators by name."""
    expanded = {e.name: e for e in sc.expanded_initiators()}
    configs: dict[str, TargetConfig] = {}
    for tgt in sc.targets:
        inits = []
        base = HANDLE_ALIGN
        offered = offered_features(tgt)
        for e in expanded.values():
            if e.target != tgt.name:
                continue
            inits.append(InitiatorConfig(
                e.name, Initiator.random_id(sc.seed, e.name), e.quota, base, e.spec.handles,
                offered, e.spec.trust_domain))
            base += -(-e.spec.handles // HANDLE_ALIGN) * HANDLE_ALIGN
        try:
            configs[tgt.name] = TargetConfig(
                blocks=tgt.blocks, block_size=tgt.block_size, initiators=tuple(inits),
                ring_slots=tgt.ring_slots, max_inline=tgt.max_inline,
                request_credits=tgt.request_credits,
                ticket_timeout_ms=tgt.ticket_timeout // PS_PER_MS,
                retention_ms=tgt.retention // PS_PER_MS,
                counter_mode=CounterMode(tgt.counter_mode), binding=Binding(tgt.binding),
                addr_le=addr_le(tgt))
        except ValueError as exc:  # a rule check() missed: still one line naming the target
            raise SchemaRuleError(target_path(sc, tgt.name), str(exc)) from None
    return configs, expanded


def build_graph(sc: Scenario, profiles: dict[str, NicProfile]) -> nx.Graph:
    """Hosts and switches; edge attributes ``gbps`` and ``latency_ps``; switch nodes
    ``latency_ps``."""
    g: nx.Graph = nx.Graph()
    main = profiles[sc.target.name]
    for host in profiles:
        g.add_node(host, kind="host", latency_ps=0)
    net = sc.network
    if not net.links:
        sw = round(main.switch_ns * 1000) if net.switch_latency is None else net.switch_latency
        g.add_node(DEFAULT_SWITCH, kind="switch", latency_ps=sw)
        for host, prof in profiles.items():
            g.add_edge(host, DEFAULT_SWITCH, gbps=prof.link_gbps,
                       latency_ps=round((prof.propagation_ns + prof.phy_ns) * 1000))
        return g
    for s in net.switches:
        g.add_node(s.name, kind="switch", latency_ps=s.latency)
    for link in net.links:
        end = link.a if link.a in profiles else link.b if link.b in profiles else None
        prof = profiles[end] if end is not None else main
        g.add_edge(link.a, link.b,
                   gbps=prof.link_gbps if link.rate is None else link.rate / 1e9,
                   latency_ps=round((prof.propagation_ns + prof.phy_ns) * 1000)
                   if link.latency is None else link.latency)
    return g


def build(sc: Scenario, *, trace: bool | Tracer = False, oracle: bool = True) -> System:
    """The system of ``sc`` (targets, initiators, connections not yet made).

    Initiators keep no :attr:`~kbtpsim.system.Initiator.results` (the driver records each
    operation as it finishes). Without ``oracle`` the servers keep no log of target calls
    and the initiators no received messages: only the oracle replays them, and they grow
    with the run. ``trace``: a tracer for every NIC (True: an unbounded one)."""
    configs, expanded = target_configs(sc)
    sim = Simulation(trace=trace is True, seed=sc.seed, fast=sc.run.fidelity == "fast")
    if isinstance(trace, Tracer):
        sim.tracer = trace  # before any NIC is added
    profiles: dict[str, NicProfile] = {}
    servers: dict[str, SoftwareTargetServer] = {}
    for i, tgt in enumerate(sc.targets):
        path = "target" if i == 0 else f"additional_targets[{i - 1}]"
        prof = nic_profile(tgt.nic, f"{path}.nic")
        profiles[tgt.name] = prof
        costs = CpuCosts(per_op_ns={k: v / 1000 for k, v in tgt.cpu.op_costs.items()})
        kw: dict[str, Any] = dict(name=tgt.name, profile=prof, cores=tgt.cpu.cores,
                                  costs=costs, staging_bytes=tgt.staging, keep_log=oracle)
        if tgt.mode == "offload":
            servers[tgt.name] = _offloaded(sim, configs[tgt.name], tgt, kw)
        elif tgt.mode in BASELINE_MODES:  # not KBTP: kbtpsim.baselines
            from kbtpsim.baselines import make_server

            servers[tgt.name] = make_server(sim, configs[tgt.name], tgt, profile=prof,
                                            costs=costs)  # type: ignore[assignment]
        else:
            servers[tgt.name] = SoftwareTargetServer(sim, configs[tgt.name], **kw)
        if tgt.cpu.background > 0:  # every mode: software, offload, baselines
            servers[tgt.name].cpu.set_background(cpu_background(sc, tgt))
    initiators: dict[str, Initiator] = {}
    specs = {t.name: t for t in sc.targets}
    for e in expanded.values():
        prof = nic_profile(e.spec.nic, f"{e.path}.nic")
        profiles[e.name] = prof
        if specs[e.target].mode in BASELINE_MODES:
            from kbtpsim.baselines import make_client

            initiators[e.name] = make_client(  # type: ignore[assignment]
                sim, e.name, specs[e.target], profile=prof, seed=sc.seed,
                initiator_id=Initiator.random_id(sc.seed, e.name),
                completion_credits=e.spec.completion_credits,
                buffer_bytes=initiator_buffers(e, specs[e.target]))
            continue
        initiators[e.name] = Initiator(
            sim, e.name, profile=prof, seed=sc.seed,
            initiator_id=Initiator.random_id(sc.seed, e.name),
            requested_features=requested_features(e, specs[e.target]),
            completion_credits=e.spec.completion_credits,
            buffer_bytes=initiator_buffers(e, specs[e.target]),
            counter_mode=CounterMode(specs[e.target].counter_mode),
            keep_results=False, keep_received=oracle)
    graph = build_graph(sc, profiles)
    return System(sc, sim, servers, configs, initiators, expanded, graph)


def cpu_background(sc: Scenario, tgt: TargetSpec) -> Background:
    """``target.cpu.background`` and ``slice`` of ``tgt``: the slices' phases are drawn
    from the scenario seed and the target's name (kbtpsim.system.contention)."""
    return Background(tgt.cpu.background, tgt.cpu.slice, seed=f"{sc.seed}/{tgt.name}")


def _offloaded(sim: Simulation, config: TargetConfig, tgt: TargetSpec,
               kw: dict[str, Any]) -> SoftwareTargetServer:
    """``mode: offload``: the chain target (kbtpsim.chains), with the operations
    ``target.operations`` keeps on the CPU, and with ``target.read_source_stores:
    software`` the Read-source store variants, left out of every connection's chain."""
    from kbtpsim.chains import OPERATIONS
    from kbtpsim.chains.server import OffloadedTargetServer

    keep = {op.upper() for op, where in tgt.operations.items() if where == "software"}
    read_source = (*OPERATIONS["STORE-READ"], *OPERATIONS["ALLOC_STORE-READ"]) \
        if tgt.read_source_stores == "software" else ()
    variants = tuple(v for op in CHAIN_OPS if op.upper() not in keep
                     for v in OPERATIONS[op.upper()] if v not in read_source)
    return OffloadedTargetServer(sim, config, addr_le=config.addr_le, variants=variants,
                                 refill_batch=refill_batch(tgt),
                                 chains=chain_design(tgt),
                                 chain_recyclers=tgt.chain_recyclers,
                                 free_on_nic=tgt.operations.get("free") == "offload",
                                 table_in_device_memory=tgt.table_memory == "device",
                                 repost_ns=None if tgt.cpu.repost_wqe is None
                                 else tgt.cpu.repost_wqe / 1000, **kw)


def connect_all(system: System) -> Any:
    """Event: every initiator connected (over its path) with its session established."""
    env = system.env
    procs = []
    for name, ini in system.initiators.items():
        e = system.expanded[name]
        link = _link(system, name, e.target)
        procs.append(ini.connect(system.servers[e.target], link))
    return env.all_of(procs)


def _link(system: System, ini: str, target: str) -> Link:
    g = system.graph
    try:
        path = nx.shortest_path(g, ini, target, weight="latency_ps")
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        raise SchemaRuleError("network.links", f"no path from {ini!r} to {target!r}") \
            from None
    system.paths[ini] = path
    delay = sum(g.edges[a, b]["latency_ps"] for a, b in itertools.pairwise(path))
    delay += sum(g.nodes[n]["latency_ps"] for n in path[1:-1])
    last = (path[-2], path[-1])
    port_name = f"{target}<->{path[-2]}"
    server = system.servers[target]
    prof = server.nic.profile
    port = system.ports.get(port_name)
    if port is None:
        gbps = g.edges[last]["gbps"]
        shared = Link(system.env, gbps=gbps, propagation_ns=0, overhead=prof.wire_overhead,
                      tracer=system.sim.tracer, names=(target, path[-2]))
        port = Port(port_name, gbps, shared.a_to_b.wire, shared.b_to_a.wire, shared)
        system.ports[port_name] = port
    assert port.link is not None
    # the target's side of the path: its connections share the port's serialisers
    return port.link.branch(propagation_ns=delay / 1000)
