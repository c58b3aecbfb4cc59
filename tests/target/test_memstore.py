"""The memory-backed target (docs/decisions.md, T14): the same behaviour as the dict-backed
one, with its table, ring slots, Head/Tail counters and pool as bytes in a ByteStore."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from kbtpsim.atomics import RING_ADD_DATA, masked_fetch_add
from kbtpsim.nic.memory import SparseMemory
from kbtpsim.target import CounterMode, Target, TargetConfig
from kbtpsim.target.bytestore import ByteStore, SparseBytes
from kbtpsim.target.layout import TargetLayout
from kbtpsim.target.memstore import MemBlockTable, MemFreeRing, MemPool
from kbtpsim.wire import (
    EntryFlag,
    Feature,
    RingSlot,
    Status,
    TableEntry,
)

from . import harness, test_interleaving, test_stateful
from .harness import BS, OK, completions, ini, loaded_data

ROOT = Path(__file__).resolve().parents[2]
#: Stores the memory-backed target is run on (SparseBytes is kbtpsim.sparse.SparseMemory,
#: the NIC host's memory, so one entry covers both).
STORES: dict[str, Callable[[], ByteStore]] = {"SparseMemory": SparseMemory}


# --- byte-level view of a target ----------------------------------------------------


def assert_bytes_match(ref: Target, mem: Target) -> None:
    """Decoding ``mem``'s bytes at its layout's addresses gives ``ref``'s structures."""
    store, lay = mem.store, mem.layout
    assert store is not None
    le = lay.addr_le
    table = store.read(lay.table_addr, 16 * lay.table_count)
    for i in range(lay.table_count):
        handle = lay.table_base_handle + i
        assert table[16 * i : 16 * i + 16] == ref.table.get(handle).encode(le), hex(handle)
    for ring_lay, ring in zip(lay.rings, ref.rings, strict=True):
        raw = store.read(ring_lay.slots_addr, 16 * ring_lay.n_slots)
        for s in range(ring_lay.n_slots):
            assert RingSlot.decode(raw[16 * s : 16 * s + 16], le) == ring.slot(16 * s)
            assert raw[16 * s + 4 : 16 * s + 8] == bytes(4)  # Reserved
        order = lay.counter_byte_order
        assert int.from_bytes(store.read(ring_lay.head_addr, 8), order) == ring.head
        assert int.from_bytes(store.read(ring_lay.tail_addr, 8), order) == ring.tail
    bs = ref.config.block_size
    for block in ref.pool.offsets:
        assert store.read(lay.block_addr(block), bs) == ref.pool.read(block, bs), hex(block)


class Twin:
    """A dict-backed and a memory-backed target driven in lockstep: every call goes to
    both and must return the same (or raise the same exception type)."""

    CALLS: ClassVar[frozenset[str]] = frozenset({
        "connect", "disconnect", "handle", "handle_message", "read_slot", "complete_read",
        "advance", "next_deadline", "remote_fetch_add", "remote_read", "remote_write",
        "check_invariant", "stats", "state",
    })

    def __init__(self, config: TargetConfig, store: ByteStore, counter_order: str) -> None:
        self.ref = Target(config)
        layout = TargetLayout.plan(config, 0x7000_0000, counter_byte_order=counter_order,
                                   align=64)
        self.mem = Target(config, store=store, layout=layout)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.ref, name)
        if name not in self.CALLS:
            return attr
        other = getattr(self.mem, name)

        def call(*args: Any, **kw: Any) -> Any:
            try:
                want = attr(*args, **kw)
            except Exception as exc:
                with pytest.raises(type(exc)):
                    other(*args, **kw)
                raise
            assert other(*args, **kw) == want, name
            return want

        return call

    def compare(self) -> None:
        assert self.mem.state() == self.ref.state()
        assert self.mem.stats() == self.ref.stats()
        assert_bytes_match(self.ref, self.mem)


class LockstepMachine(test_stateful.TargetMachine):
    """The stateful rules against a Twin (SparseBytes, little-endian counters)."""

    store_factory: ClassVar[Callable[[], ByteStore]] = SparseBytes
    counter_order: ClassVar[str] = "little"

    def __init__(self) -> None:
        cls = type(self)
        original = test_stateful.Target
        test_stateful.Target = (  # type: ignore[misc,assignment]
            lambda config: Twin(config, cls.store_factory(), cls.counter_order))
        try:
            super().__init__()
        finally:
            test_stateful.Target = original  # type: ignore[misc]

    @invariant()
    def conserved(self) -> None:
        super().conserved()
        self.target.compare()


class LockstepUnmaskedLE(LockstepMachine):
    """Unmasked counters, ADDR_LE, kbtpsim.nic's SparseMemory, big-endian counters."""

    options: ClassVar[dict[str, object]] = test_stateful.UnmaskedLittleEndianMachine.options
    store_factory: ClassVar[Callable[[], ByteStore]] = SparseMemory
    counter_order: ClassVar[str] = "big"


SETTINGS = settings(max_examples=40, stateful_step_count=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
LockstepMachine.TestCase.settings = SETTINGS
LockstepUnmaskedLE.TestCase.settings = SETTINGS
TestLockstep = LockstepMachine.TestCase
TestLockstepUnmaskedLE = LockstepUnmaskedLE.TestCase


@pytest.mark.parametrize("machine_class", [LockstepMachine, LockstepUnmaskedLE])
def test_lockstep_seeded_random_walk(machine_class: type[LockstepMachine]) -> None:
    """The deep seeded walk of test_stateful, in lockstep (full quotas, wrapped rings)."""
    test_stateful.test_seeded_random_walk(machine_class)


def test_existing_target_suite_in_memory_mode() -> None:
    """The target test modules, rerun with every Target memory-backed on SparseBytes."""
    script = (
        "import sys, pytest\n"
        "import kbtpsim.target.processor as p\n"
        "from kbtpsim.target.bytestore import SparseBytes\n"
        "orig = p.Target.__init__\n"
        "def init(self, config, store=None, layout=None):\n"
        "    orig(self, config, SparseBytes() if store is None else store, layout)\n"
        "p.Target.__init__ = init\n"
        "sys.exit(pytest.main(sys.argv[1:]))\n"
    )
    skip = {"test_memstore.py", "test_layout.py", "test_stateful.py", "test_memory.py"}
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/target").glob("test_*.py")
                   if p.name not in skip)
    args = [*files, "-q", "-p", "no:cacheprovider", "--deselect",
            # patches Pool.read, which MemPool overrides: dict-mode specific
            "tests/target/test_statuses.py::test_internal_error_is_a_completion_without_side_effect"]
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


# --- the draft's interleaving example on both stores -------------------------------------


@pytest.fixture(params=sorted(STORES))
def memory_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """harness.make builds memory-backed targets on the parametrized store."""
    factory = STORES[request.param]
    monkeypatch.setattr(harness, "Target",
                        lambda config: Target(config, store=factory()))
    return str(request.param)


@pytest.mark.parametrize("mode", [CounterMode.MASKED, CounterMode.UNMASKED])
def test_draft_interleaving_example_in_memory(memory_mode: str, mode: CounterMode) -> None:
    test_interleaving.test_draft_interleaving_example(mode)


@pytest.mark.parametrize("case", [
    test_interleaving.test_requests_queue_behind_a_deferred_free,
    test_interleaving.test_allocation_waits_for_a_deferred_slot_write,
    test_interleaving.test_held_allocation_that_reads_too_early_waits,
])
def test_interleavings_in_memory(memory_mode: str, case: Callable[[], None]) -> None:
    case()


@pytest.mark.parametrize("store_name", sorted(STORES))
def test_draft_example_bytes(store_name: str) -> None:
    """The example's end state, read as bytes: slot 0 = {4, block 101} consumed, Head 5."""
    config = TargetConfig(blocks=4, block_size=BS, first_block=100, ring_slots=4,
                          initiators=(ini("X", 1, 0x100), ini("Y", 3, 0x200)))
    store = STORES[store_name]()
    layout = TargetLayout.plan(config, 0x4000_0000, counter_byte_order="big")
    target = Target(config, store=store, layout=layout)
    ring = layout.rings[0]
    assert store.read(ring.slot_addr(16), 16) == RingSlot(1, 101 * BS).encode()
    target.connect(1, 0)
    target.connect(2, 0)
    x, y = harness.Client(target, "X", 1), harness.Client(target, "Y", 2)
    x.hello()
    y.hello()
    x.alloc_store(0x100, b"X", hold=True)
    for i in range(3):
        y.alloc_store(0x200 + i, b"Y%d" % i)
    assert y.free(0x200) == []
    assert store.read(ring.slot_addr(0), 16) == RingSlot(0, 100 * BS).encode()
    assert store.read(ring.tail_addr, 8) == (5 << 32 | 16).to_bytes(8, "big")
    target.read_slot(1, 0)
    assert store.read(ring.slot_addr(0), 16) == RingSlot(4, 101 * BS).encode()
    y.alloc_store(0x203, b"next")
    assert store.read(ring.slot_addr(0), 16) == RingSlot(4, (1 << 64) - 1).encode()
    assert store.read(ring.head_addr, 8) == (5 << 32 | 16).to_bytes(8, "big")
    assert store.read(layout.block_addr(101 * BS), 4) == b"next"
    assert TableEntry.decode(store.read(layout.entry_addr(0x203), 16)).block_offset == 101 * BS
    target.check_invariant()


# --- external writes are seen ------------------------------------------------------------


def test_external_entry_write_is_seen_by_load() -> None:
    """Something else (a NIC chain) writes an entry and a block; LOAD serves them."""
    store = SparseBytes()
    config = TargetConfig(blocks=8, block_size=BS, initiators=(ini("a", 4, 0x100),))
    target = Target(config, store=store)
    target.connect(1, 0)
    a = harness.Client(target, "a", 1)
    a.hello()
    lay = target.layout
    block = 5 * BS
    store.write(lay.block_addr(block), b"written by the NIC")
    entry = TableEntry(EntryFlag.VALID | EntryFlag.SEALED, 7, 18, block)
    store.write(lay.entry_addr(0x102), entry.encode(lay.addr_le))
    assert target.table.get(0x102) == entry
    out = a.load(0x102, flags=0, generation=7)
    assert loaded_data(out) == b"written by the NIC"
    (m,) = completions(out)
    assert (m.status, m.generation, m.data_length, m.block_offset) == (OK, 7, 18, block)
    assert (0x102, entry) in target.state()[0]  # type: ignore[operator]
    # Data Length changed in memory: the next STORE's checks see it (SEALED -> SEALED).
    (m,) = completions(a.store(0x102, b"x"))
    assert m.status is Status.SEALED


def test_external_counter_advance_is_seen() -> None:
    """An initiator's FetchAdd executed by a NIC on the Head bytes: the target's next
    allocation takes the next ticket."""
    store = SparseMemory()
    config = TargetConfig(blocks=4, block_size=BS, initiators=(ini("a", 4, 0x100),))
    layout = TargetLayout.plan(config, counter_byte_order="big")
    target = Target(config, store=store, layout=layout)
    ring = layout.rings[0]
    old = store.read_u64(ring.head_addr, "big")
    store.write_u64(ring.head_addr, masked_fetch_add(old, RING_ADD_DATA,
                                                     target.shared_ring.add_mask), "big")
    assert target.shared_ring.head_ticket == 1
    assert target.shared_ring.take_ticket().ticket == 1
    assert store.read_u64(ring.head_addr, "big") == 2 << 32 | 32


def test_external_slot_consume_is_seen() -> None:
    """A NIC chain's allocation: FetchAdd on Head, then it consumes slot 0 in memory."""
    store = SparseBytes()
    config = TargetConfig(blocks=4, block_size=BS, ring_slots=8,
                          initiators=(ini("a", 4, 0x100),))
    target = Target(config, store=store)
    ring, lay = target.shared_ring, target.layout.rings[0]
    head = int.from_bytes(store.read(lay.head_addr, 8), "little")
    store.write(lay.head_addr, masked_fetch_add(head, RING_ADD_DATA, ring.add_mask)
                .to_bytes(8, "little"))
    store.write(lay.slot_addr(0) + 8, bytes([0xFF] * 8))
    assert ring.slot(0).consumed and ring.head_ticket == 1
    assert ring.lazy_initial_count() == 3
    assert not ring.holds_initial(0)
    assert ring.snapshot()[3] == ((0, (0, (1 << 64) - 1)),)


# --- clearing, laziness, memory ----------------------------------------------------------


@pytest.mark.parametrize("store_name", sorted(STORES))
def test_clearing_on_free_zeroes_the_bytes(store_name: str) -> None:
    store = STORES[store_name]()
    config = TargetConfig(blocks=2, block_size=3 * 4096, max_inline=8192, initiators=(
        ini("a", 1, 0x100), ini("b", 1, 0x200, domain="other")))
    target = Target(config, store=store)
    target.connect(1, 0)
    a = harness.Client(target, "a", 1)
    a.hello()
    (m,) = completions(a.alloc_store(0x100, b"secret" * 1000))
    addr = target.layout.block_addr(m.block_offset)
    assert store.read(addr, 6) == b"secret"
    (f,) = completions(a.free(0x100))
    assert f.status is OK
    assert store.read(addr, 3 * 4096) == bytes(3 * 4096)
    assert target.pool.materialized_blocks == 0


def test_nothing_is_written_up_front() -> None:
    store = SparseBytes()
    config = TargetConfig(blocks=1 << 20, block_size=BS, initiators=(
        ini("a", 8, 0, count=1 << 20), ini("d", 8, 1 << 20, features=Feature.DIRECT_ALLOC)))
    target = Target(config, store=store)
    assert store.pages_touched == 0
    ring = target.shared_ring
    n = ring.n_slots
    f = len(ring.blocks)
    assert ring.slot(16 * (f - 1)) == RingSlot(f - 1, ring.blocks[-1])
    assert ring.slot(16 * (n - 1)) == RingSlot((n - 1 - n) % (1 << 32), (1 << 64) - 1)
    assert target.table.get(12345) == TableEntry(generation=1)
    assert (ring.head_ticket, ring.tail_ticket) == (0, f)
    assert store.pages_touched == 0
    assert isinstance(target.pool, MemPool) and isinstance(target.table, MemBlockTable)
    assert all(isinstance(r, MemFreeRing) for r in target.rings)


# --- SparseBytes -------------------------------------------------------------------------


def test_sparse_bytes_initializer() -> None:
    mem = SparseBytes()
    mem.add_initializer(4090, 20, lambda addr, n: bytes((a % 251) for a in range(addr, addr + n)))
    assert mem.read(4088, 24) == b"\0\0" + bytes(a % 251 for a in range(4090, 4110)) + b"\0\0"
    mem.write(4095, b"X")  # materialises page 0 from the fill
    assert mem.pages_touched == 1
    assert mem.read(4090, 6) == bytes(a % 251 for a in range(4090, 4095)) + b"X"
    assert mem.read(4096, 4) == bytes(a % 251 for a in range(4096, 4100))
    with pytest.raises(ValueError, match="overlaps"):
        mem.add_initializer(4100, 100, lambda addr, n: bytes(n))
    assert list(mem.written_pages(0, 1 << 20)) == [0]
    assert isinstance(mem, ByteStore) and isinstance(SparseMemory(), ByteStore)
