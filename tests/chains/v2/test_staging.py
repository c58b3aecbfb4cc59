"""Decision C24: chains v2 serve Read-source stores of blocks of several packets, the
data Read staged and copied into the block behind a test of the Read's CQE."""

from __future__ import annotations

from pathlib import Path

from kbtpsim.chains.dispatch import TORN_READ
from kbtpsim.chains.plan import stages_reads
from kbtpsim.nic import PROFILES
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[3]
BIG_READS = ["target.block_size=64KiB", "target.max_inline=4KiB",
             "initiators[0].workload.length={value: 64KiB}", "stop.operations=120"]


def test_who_stages() -> None:
    """v2 with native conditions, blocks above the mtu; never v1 (its connection QP's CQ
    is shared with the workers, so a Read's CQE has no fixed place), never cx5 (no
    native conditions: the test would be CAS-armed, not built)."""
    be = PROFILES["ideal-be"]
    assert stages_reads("v2", be, 2 * be.mtu)
    assert not stages_reads("v2", be, be.mtu)
    assert not stages_reads("v1", be, 2 * be.mtu)
    assert not stages_reads("v2", PROFILES["cx5"], 2 * be.mtu)


def _served(chains: str) -> tuple[dict, list]:  # type: ignore[type-arg]
    sc = load_scenario(ROOT / "scenarios/quickstart-offload.yaml",
                       [*BIG_READS, f"target.chains={chains}"], seed=1)
    out = run_scenario(sc, oracle=True)
    target = next(iter(out.results["targets"].values()))
    return target["fallbacks"], out.divergences


def test_v2_serves_read_source_stores_of_64_kib_on_the_nic_under_the_oracle() -> None:
    """64 KiB blocks, Max Inline 4 KiB: every STORE and ALLOC_STORE reads its data (16
    packets). Chains v2 serve them on the NIC, results identical to the reference; v1
    leaves them to the CPU (rule torn-read)."""
    fallbacks, divergences = _served("v2")
    assert divergences == []
    for op in ("STORE", "ALLOC_STORE"):
        assert fallbacks["served"][op]["nic"] > 0, fallbacks
        assert TORN_READ not in fallbacks["reasons"].get(op, {})
    fallbacks, divergences = _served("v1")
    assert divergences == []
    assert fallbacks["served"]["STORE"]["nic"] == 0
    assert TORN_READ in fallbacks["reasons"]["STORE"]
