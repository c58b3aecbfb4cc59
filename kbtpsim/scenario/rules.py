"""The scenario's rules that span keys: :func:`check` (quotas summing above F, a feature
the binding forbids, a KV-cache block that does not fit the Block Size, ...), which
raises :class:`~kbtpsim.scenario.fields.SchemaRuleError` naming the first bad key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.scenario.fields import SchemaRuleError, did_you_mean
from kbtpsim.scenario.target import BASELINE_MODES, CHAIN_OPS, TargetSpec, nic_profile
from kbtpsim.units import PS_PER_MS

if TYPE_CHECKING:
    from kbtpsim.scenario.initiator import InitiatorSpec
    from kbtpsim.scenario.schema import ExpandedInitiator, Scenario


def check(sc: Scenario) -> None:
    """Rules spanning keys; raises :class:`SchemaRuleError` naming the first bad key."""
    if sc.stop.operations is None and sc.stop.time is None:
        raise SchemaRuleError("stop", "give operations, time, or both")
    if sc.stop.time is not None and sc.stop.time <= sc.stop.warmup:
        raise SchemaRuleError("stop.time", "must be later than stop.warmup")
    names: set[str] = set()
    for i, tgt in enumerate(sc.targets):
        path = "target" if i == 0 else f"additional_targets[{i - 1}]"
        if tgt.name in names:
            raise SchemaRuleError(f"{path}.name", f"duplicate host name {tgt.name!r}")
        names.add(tgt.name)
        _check_target(tgt, path)
    inis = sc.expanded_initiators()
    for e in inis:
        if e.name in names:
            raise SchemaRuleError(f"{e.path}.name", f"duplicate host name {e.name!r}")
        names.add(e.name)
        if e.target not in {t.name for t in sc.targets}:
            raise SchemaRuleError(f"{e.path}.target", f"no target named {e.target!r}"
                                  f"{did_you_mean(e.target, [t.name for t in sc.targets])}")
    for idx, spec in enumerate(sc.initiators):
        nic_profile(spec.nic, f"initiators[{idx}].nic")
        _check_workload(sc, spec, f"initiators[{idx}]")
    for i, tgt in enumerate(sc.targets):
        path = "target" if i == 0 else f"additional_targets[{i - 1}]"
        total = 0
        for e in inis:
            if e.target != tgt.name:
                continue
            total += e.quota
            if total > tgt.blocks:
                raise SchemaRuleError(f"{e.path}.quota", f"quotas sum to at least {total}, "
                                      f"above {path}.blocks (F = {tgt.blocks})")
        if (tgt.rings == "per_initiator" or tgt.features.direct_alloc) and any(
                e.quota == 0 for e in inis if e.target == tgt.name):
            e0 = next(e for e in inis if e.target == tgt.name and e.quota == 0)
            raise SchemaRuleError(f"{e0.path}.quota", "per-initiator rings (DIRECT_ALLOC) "
                                  "need a quota of at least 1")
        if tgt.features.direct_load and len(
                {e.spec.trust_domain for e in inis if e.target == tgt.name}) > 1:
            raise SchemaRuleError(f"{path}.features.direct_load", "DIRECT_LOAD needs all "
                                  "initiators of the target in one trust domain")
    _check_static_slots(sc, inis)
    _check_network(sc, names)


def _check_target(tgt: TargetSpec, path: str) -> None:
    prof = nic_profile(tgt.nic, f"{path}.nic")
    if tgt.mode == "offload" and tgt.chains == "v2":
        from kbtpsim.chains.v2 import recycle_blockers

        why = recycle_blockers(prof)
        if why:
            raise SchemaRuleError(f"{path}.chains", f"v2 cannot run on NIC profile "
                                  f"{prof.name!r}: {'; '.join(why)} (use chains: v1)")
    if tgt.block_size % 8 or tgt.block_size <= 0 or tgt.block_size >= 1 << 32:
        raise SchemaRuleError(f"{path}.block_size", "must be a positive multiple of 8 "
                              "below 4GiB")
    if tgt.ring_slots is not None:
        n = tgt.ring_slots
        if n < 2 or n & (n - 1):
            raise SchemaRuleError(f"{path}.ring_slots", "N must be a power of two >= 2")
        if n < tgt.blocks:
            raise SchemaRuleError(f"{path}.ring_slots", f"N = {n} is below F = {tgt.blocks}")
    for key in ("ticket_timeout", "retention"):
        value = getattr(tgt, key)
        if value % PS_PER_MS or (key == "ticket_timeout" and value <= 0):
            raise SchemaRuleError(f"{path}.{key}", "must be a positive whole number of ms")
    if tgt.features.record_completion and tgt.binding != "infiniband":
        raise SchemaRuleError(f"{path}.features.record_completion",
                              "needs binding: infiniband (RDMAP must not offer it)")
    if tgt.staging < 2 * tgt.block_size:
        raise SchemaRuleError(f"{path}.staging", f"must hold at least two blocks "
                              f"({2 * tgt.block_size} octets)")
    if tgt.mode != "offload":
        for key, given in (("operations", bool(tgt.operations)),
                           ("read_source_stores", "read_source_stores" in tgt.model_fields_set),
                           ("table_memory", tgt.table_memory != "host")):
            if given:
                raise SchemaRuleError(f"{path}.{key}", "only meaningful with mode: offload")
    if tgt.mode == "offload" and tgt.counter_mode == "unmasked":
        # the chains' FetchAdds on Head are the masked ring-counter form (draft,
        # "Free-Block Ring"); decision O9
        raise SchemaRuleError(f"{path}.counter_mode", "unmasked counters cannot be used "
                              f"with {path}.mode: offload (the chains take Tickets with "
                              "masked FetchAdds; use counter_mode: masked)")
    for op, where in tgt.operations.items():
        if where == "offload" and op not in CHAIN_OPS:
            raise SchemaRuleError(f"{path}.operations.{op}", f"{op.upper()} has no chain: it "
                                  "always runs on the target CPU (docs/chains.md)")
    _check_baseline(tgt, path)


def _check_baseline(tgt: TargetSpec, path: str) -> None:
    """Baseline modes (kbtpsim.baselines) speak no KBTP: no KBTP features or rings."""
    if tgt.mode not in BASELINE_MODES:
        if "baseline" in tgt.model_fields_set:
            raise SchemaRuleError(f"{path}.baseline", "only meaningful with mode: "
                                  + ", ".join(BASELINE_MODES))
        return
    for key in ("direct_load", "direct_alloc", "record_completion"):
        if getattr(tgt.features, key):
            raise SchemaRuleError(f"{path}.features.{key}", f"a KBTP feature: not "
                                  f"available with mode: {tgt.mode}")
    if tgt.rings != "shared":
        raise SchemaRuleError(f"{path}.rings", f"KBTP rings: not available with mode: "
                              f"{tgt.mode}")
    if tgt.baseline.granularity < 1:
        raise SchemaRuleError(f"{path}.baseline.granularity", "must be at least 1 octet")
    if tgt.baseline.copy_rate <= 0:
        raise SchemaRuleError(f"{path}.baseline.copy_rate", "must be positive")


def _check_static_slots(sc: Scenario, inis: list[ExpandedInitiator]) -> None:
    """A one-sided static region in sequence slots must hold one longest sequence."""
    for e in inis:
        tgt = next(t for t in sc.targets if t.name == e.target)
        kv = e.spec.workload.kvcache
        if tgt.mode != "one_sided_static" or e.spec.workload.kind != "kvcache" or \
                kv.role != "prefill" or tgt.baseline.static_layout != "sequence_slots":
            continue
        need = -(-kv.sequence_tokens_max // kv.tokens_per_block)
        if e.quota < need:
            raise SchemaRuleError(f"{e.path}.quota", f"{e.quota} blocks: a one-sided static "
                                  f"region in sequence slots must hold one longest sequence "
                                  f"({need} blocks)")


def _check_workload(sc: Scenario, spec: InitiatorSpec, path: str) -> None:
    wl = spec.workload
    tgt = next((t for t in sc.targets if t.name == (spec.target or sc.target.name)),
               sc.target)
    ln = wl.length
    lp = f"{path}.workload.length"
    if ln.distribution == "uniform" and ln.min > ln.max:
        raise SchemaRuleError(f"{lp}.min", f"{ln.min} is above max ({ln.max})")
    if ln.distribution == "choice":
        if not ln.values:
            raise SchemaRuleError(f"{lp}.values", "give at least one length")
        if ln.weights and len(ln.weights) != len(ln.values):
            raise SchemaRuleError(f"{lp}.weights", "one weight per value")
    longest = {"fixed": ln.value, "uniform": ln.max, "block": tgt.block_size,
               "choice": max(ln.values or [0])}[ln.distribution]
    if wl.kind == "synthetic" and longest > tgt.block_size:
        raise SchemaRuleError(lp, f"lengths up to {longest} exceed the Block Size "
                              f"({tgt.block_size})")
    offered = tgt.features
    mix: dict[str, float] = {str(k): v for k, v in wl.mix.items()}
    for op, feature in (("direct_load", "direct_load"), ("direct_alloc", "direct_alloc")):
        if mix.get(op, 0) > 0 and not getattr(offered, feature):
            raise SchemaRuleError(f"{path}.workload.mix.{op}", f"needs target.features."
                                  f"{feature}: true")
        if mix.get(op, 0) > 0 and getattr(spec.features, feature) is False:
            raise SchemaRuleError(f"{path}.workload.mix.{op}",
                                  f"the initiator does not request {feature}")
    if wl.record and not (offered.record_completion
                          and spec.features.record_completion is not False):
        raise SchemaRuleError(f"{path}.workload.record", "needs target.features."
                              "record_completion: true (and binding: infiniband)")
    if wl.misbehave.hoard_tickets and not offered.direct_alloc:
        raise SchemaRuleError(f"{path}.workload.misbehave.hoard_tickets",
                              "needs target.features.direct_alloc: true")
    if wl.kind == "kvcache":
        kv = wl.kvcache
        kp = f"{path}.workload.kvcache"
        if kv.model == "custom" and not kv.bytes_per_token:
            raise SchemaRuleError(f"{kp}.bytes_per_token", "required with model: custom")
        if kv.sequence_tokens_min > kv.sequence_tokens_max:
            raise SchemaRuleError(f"{kp}.sequence_tokens_min", "is above "
                                  "sequence_tokens_max")
        if kv.block_bytes > tgt.block_size:
            raise SchemaRuleError(f"{kp}.tokens_per_block", f"a block of "
                                  f"{kv.tokens_per_block} tokens x {kv.token_bytes} octets "
                                  f"= {kv.block_bytes} exceeds the Block Size "
                                  f"({tgt.block_size})")
        for key, value, feature in (("load_with", kv.load_with, "direct_load"),
                                    ("store_with", kv.store_with, "direct_alloc")):
            if value != feature:
                continue
            if not getattr(offered, feature):
                raise SchemaRuleError(f"{kp}.{key}", f"needs target.features.{feature}: true")
            if getattr(spec.features, feature) is False:
                raise SchemaRuleError(f"{kp}.{key}", f"the initiator does not request "
                                      f"{feature}")
    if tgt.mode in BASELINE_MODES and wl.misbehave.invalid_fraction and \
            wl.misbehave.invalid_kind == "malformed":
        raise SchemaRuleError(f"{path}.workload.misbehave.invalid_kind", "malformed KBTP "
                              f"requests: not available with mode: {tgt.mode}")


def _check_network(sc: Scenario, hosts: set[str]) -> None:
    switches: set[str] = set()
    for i, sw in enumerate(sc.network.switches):
        if sw.name in hosts or sw.name in switches:
            raise SchemaRuleError(f"network.switches[{i}].name",
                                  f"duplicate name {sw.name!r}")
        switches.add(sw.name)
    nodes = hosts | switches
    for i, link in enumerate(sc.network.links):
        for end in ("a", "b"):
            node = getattr(link, end)
            if node not in nodes:
                raise SchemaRuleError(f"network.links[{i}].{end}", f"no host or switch "
                                      f"named {node!r}{did_you_mean(node, sorted(nodes))}")
