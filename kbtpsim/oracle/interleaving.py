"""The draft's interleaving example (its last section; FORMATS.md) on the NIC model.

A shared ring of four free blocks 100..103 (N = F = 4, 32 KiB blocks). X's ALLOC_STORE
runs in a chain, which takes ticket 0 (FetchAdd on Head) and is then *delayed* before it
reads slot 0 (fault :class:`~kbtpsim.oracle.faults.DelayChain` at the slot Read).
Meanwhile Y's ALLOC_STOREs (chains too) take tickets 1, 2, 3 (blocks 101, 102, 103) and Y
frees block 101: the free obtains Tail ticket 4, whose slot is slot 0, not consumed yet,
so it is deferred. X's chain resumes, reads slot 0, obtains block 100 and consumes the
slot; the target CPU, seeing X's credit finish, performs the deferred free, which writes
slot 0 = {4, 101} (and completes Y's FREE); Y's next allocation (ticket 4) obtains block
101. Every completion and the final state are checked against the shadow.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import simpy

from kbtpsim.oracle.campaign import Pool, Spec, _Run
from kbtpsim.oracle.compare import Divergence
from kbtpsim.oracle.faults import DelayChain, Faults

BLOCK = 32 * 1024  #: the Block Size of the draft's numbering (decision T8, README)
X_HANDLE, Y_HANDLE = 0x100, 0x200
DELAY_NS = 200_000.0  #: how long X's chain is held before its slot Read
SCRIPTED_BS = 512  #: Block Size of the one-initiator scripted runs


@dataclass
class Outcome:
    """Block Offsets each allocation obtained, and what the oracle found."""

    x_block: int | None = None
    y_blocks: list[int] = field(default_factory=list)
    ticket4_block: int | None = None
    x_served_by: str | None = None
    free_deferred: bool = False
    slot0: bytes = b""
    divergences: list[Divergence] = field(default_factory=list)


def run_interleaving(profile: str = "ideal-be", seed: int = 1) -> Outcome:
    """Reproduce the example on ``profile`` (one whose chains serve ALLOC_STORE)."""
    faults = Faults(delay=DelayChain("X", "alloc_inline", "ai_read_slot", DELAY_NS))
    spec = Spec(seed=seed, profile=profile, ops=0, faults=faults)
    pool = Pool(initiators=(("X", X_HANDLE, "default", 1), ("Y", Y_HANDLE, "default", 3)),
                blocks=4, block_size=BLOCK, first_block=100)
    run = _Run(spec, None, pool)
    env, server = run.env, run.server
    x, y = run.inis["X"], run.inis["Y"]
    out = Outcome()
    head = server.layout.rings[0].head_addr if server.layout else 0
    order = server.layout.counter_byte_order if server.layout else "big"
    mem = server.nic.host.memory

    def data(c: bytes) -> bytes:
        return c * BLOCK

    note = run.keep

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield env.all_of([x.connect(server), y.connect(server)])
        run.new_connections()
        xp = x.alloc_store(X_HANDLE, data(b"X"), seal=True)
        while mem.read_u64(head, order) >> 32 < 1:  # X's chain holds ticket 0
            yield env.timeout(100_000)
        for i in range(3):
            res = note(y, (yield y.alloc_store(Y_HANDLE + i, data(b"Y"), seal=True)))
            out.y_blocks.append(res.completion.block_offset)
        fp = y.free(Y_HANDLE)
        yield env.timeout(20_000_000)  # the free has its Tail ticket, X still waits
        out.free_deferred = fp.is_alive
        res = note(x, (yield xp))
        out.x_block = res.completion.block_offset
        note(y, (yield fp))
        out.slot0 = mem.read(server.layout.rings[0].slot_addr(0), 16) if server.layout \
            else b""
        res = note(y, (yield y.alloc_store(Y_HANDLE + 3, data(b"4"), seal=True)))
        out.ticket4_block = res.completion.block_offset

    done = env.process(scenario())
    if not run.run_until(done, 20_000_000_000):
        out.divergences.append(Divergence("missing", "the example did not complete"))
    out.divergences += run.checkpoint(final=True)
    for info in server.credits.get(x.conn.conn_id if x.conn else -1, []):
        if info.finished.ticket == 0:
            out.x_served_by = info.finished.served
    return out




def run_load_then_store(profile: str = "ideal-be", seed: int = 1,
                        delay_ns: float = 100_000.0,
                        observe: dict[str, Any] | None = None, chains: str = "v2",
                        transform: Any = None) -> list[Divergence]:
    """Decision C16's limit made concrete: A stores a whole unsealed block at h, then
    sends, without waiting, a LOAD of h with ALLOW_UNSEALED and an inline STORE of other
    data to h. The LOAD's chain is delayed before its data Write (fault ``DelayChain``:
    the connection QP is held there). The software target runs them in order: the LOAD
    delivers the old contents. A LOAD of an unsealed block holds the gate to its
    COMPLETION, so the STORE's chain starts only then; one that released the gate early
    (mutant ``v2-early-unsealed``) lets the STORE copy its data into the block while the
    LOAD's Write has not read it yet. A sealed block cannot be stored to, which is why a
    sealed LOAD may release early. ``observe`` gets the LOAD and STORE results
    (``"load"``, ``"store"``) and the server (``"server"``)."""
    faults = Faults(delay=DelayChain("A", "load", "load_write", delay_ns))
    spec = Spec(seed=seed, profile=profile, ops=0, faults=faults, chains=chains)
    bs = SCRIPTED_BS
    run, a = _solo_run(spec, transform, 2)
    server = run.server
    note = partial(run.keep, a)

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield a.connect(server)
        run.new_connections()
        note((yield a.alloc_store(X_HANDLE, b"1" * bs, seal=False)))
        load = a.load(X_HANDLE, invalidate=False, allow_unsealed=True)
        store = a.store(X_HANDLE, b"2" * bs, inline=True, invalidate=False)
        lres = yield load
        sres = yield store
        note(lres)
        note(sres)
        if observe is not None:
            observe["load"], observe["store"], observe["server"] = lres, sres, server

    return _run_scripted(run, scenario())


def _solo_run(spec: Spec, transform: Any, blocks: int) -> tuple[_Run, Any]:
    """A scripted run of one initiator, A (handles from ``X_HANDLE``, a quota of the whole
    pool), on a pool of ``blocks`` blocks of ``SCRIPTED_BS`` octets: the run and A."""
    pool = Pool(initiators=(("A", X_HANDLE, "default", blocks),), blocks=blocks,
                block_size=SCRIPTED_BS)
    run = _Run(spec, transform, pool)
    return run, run.inis["A"]


def _owner_and_loader(spec: Spec, transform: Any, blocks: int, bs: int) -> tuple[_Run, Any, Any]:
    """A scripted run of A (handles from ``X_HANDLE``, a quota of the whole pool of
    ``blocks`` blocks of ``bs`` octets) and B (no quota: it LOADs A's handles): the run,
    A and B."""
    pool = Pool(initiators=(("A", X_HANDLE, "default", blocks),
                            ("B", X_HANDLE + 0x20, "default", 0)), blocks=blocks, block_size=bs)
    run = _Run(spec, transform, pool)
    return run, run.inis["A"], run.inis["B"]


def _run_scripted(run: _Run, scenario: Generator[simpy.Event, Any, None]) -> list[Divergence]:
    """Run a scripted scenario to its end (5 s of simulated time at most), then the final
    checkpoint: its divergences, in order ("missing" last if it did not complete)."""
    done = run.env.process(scenario)
    out: list[Divergence] = []
    if not run.run_until(done, 5_000_000_000):
        out.append(Divergence("missing", "the scenario did not complete", order=1 << 62))
    return sorted(out + run.checkpoint(final=True), key=lambda d: d.order)


#: the steps of a solo script after A connected: (run, A, note) -> its requests
SoloSteps = Callable[[_Run, Any, Callable[[Any], Any]], Generator[simpy.Event, Any, None]]


def _solo_script(spec: Spec, transform: Any, blocks: int, steps: SoloSteps,
                 observe: dict[str, Any] | None) -> list[Divergence]:
    """A scripted run of A alone (:func:`_solo_run`): A connects, ``steps`` runs (its
    results kept for the final checkpoint through ``note``), ``observe`` gets the server
    (``"server"``); the divergences (:func:`_run_scripted`)."""
    run, a = _solo_run(spec, transform, blocks)
    note = partial(run.keep, a)

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield a.connect(run.server)
        run.new_connections()
        yield from steps(run, a, note)
        if observe is not None:
            observe["server"] = run.server

    return _run_scripted(run, scenario())


def run_load_during_free(profile: str = "ideal-be", seed: int = 1,
                         delay_ns: float = 100_000.0,
                         observe: dict[str, Any] | None = None, chains: str = "v1",
                         transform: Any = None,
                         free_on_nic: bool = False) -> list[Divergence]:
    """Decision O3 made concrete: a pool of one block. A stores a sealed block at handle
    h1; B's LOAD of h1 runs in its chain, which reads the entry and is then delayed before
    its data Write (fault ``DelayChain``); meanwhile A frees h1 (the block returns to the
    ring) and stores other data at h2, which obtains the same block. B's chain then sends
    the block's new contents with the old entry's Generation. The software target, whose
    LOAD reads the entry and the block at once, delivers the old contents (the LOAD is
    linearised at the chain's entry Read). Since the chain re-reads the entry after its
    data Write (seqlock, decision O3) it sees the changed Generation and hands the LOAD
    to the CPU. Chains v2 (``chains="v2"``) have no re-read: A's FREE returns the block
    only once B's chain has finished (decision C13), so B gets the old contents, OK, and
    A's second store waits. With ``free_on_nic`` (decision C20) A's FREE runs on the NIC:
    it unbinds, finds B's LOAD counted as a reader and hands over, and the CPU holds the
    block back as before. ``observe`` gets B's LOAD result (``"load"``) and the server
    (``"server"``); ``transform``: a mutant (e.g. ``V2Mutation(quiesce=False)``)."""
    faults = Faults(delay=DelayChain("B", "load", "load_write", delay_ns))
    spec = Spec(seed=seed, profile=profile, ops=0, faults=faults, chains=chains,
                free_on_nic=free_on_nic)
    bs = 512
    run, a, b = _owner_and_loader(spec, transform, 1, bs)
    env, server = run.env, run.server

    note = run.keep

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield env.all_of([a.connect(server), b.connect(server)])
        run.new_connections()
        note(a, (yield a.alloc_store(X_HANDLE, b"1" * bs, seal=True)))
        load = b.load(X_HANDLE, invalidate=False)
        yield env.timeout(30_000_000)  # B's chain has read the entry, waits at its Write
        note(a, (yield a.free(X_HANDLE)))
        note(a, (yield a.alloc_store(X_HANDLE + 1, b"2" * bs, seal=True)))
        res = yield load
        note(b, res)
        if observe is not None:
            observe["load"] = res
            observe["server"] = server

    return _run_scripted(run, scenario())


def run_unsealed_loads(profile: str = "ideal-be", seed: int = 1,
                       observe: dict[str, Any] | None = None, chains: str = "v2",
                       transform: Any = None) -> list[Divergence]:
    """The draft's "Block Load" step 1 (the entry MUST be SEALED unless ALLOW_UNSEALED):
    A stores two whole blocks, one sealed and one not, then LOADs each with and without
    ALLOW_UNSEALED, twice (so every credit slot serves both), and once more after
    sealing the second. The software target answers NOT_SEALED to the unsealed block's
    LOADs without the flag; a chain that takes them (mutant ``v2-load-skip-sealed``)
    diverges. ``observe`` gets the server (``"server"``)."""
    bs = SCRIPTED_BS

    def steps(run: _Run, a: Any, note: Callable[[Any], Any]
              ) -> Generator[simpy.Event, Any, None]:
        note((yield a.alloc_store(X_HANDLE, b"1" * bs, seal=True)))
        note((yield a.alloc_store(X_HANDLE + 1, b"2" * bs, seal=False)))
        for _ in range(2):
            for h in (X_HANDLE, X_HANDLE + 1):
                for au in (False, True):
                    note((yield a.load(h, invalidate=False, allow_unsealed=au)))
        note((yield a.store(X_HANDLE + 1, b"3" * bs, seal=True, invalidate=False)))
        note((yield a.load(X_HANDLE + 1, invalidate=False)))

    return _solo_script(Spec(seed=seed, profile=profile, ops=0, chains=chains), transform,
                        4, steps, observe)


def run_allocs_then_loads(profile: str = "ideal-be", seed: int = 1,
                          observe: dict[str, Any] | None = None, chains: str = "v2",
                          transform: Any = None) -> list[Divergence]:
    """Decision C19 made concrete: A sends two ALLOC_STOREs (sealed) and LOADs of both
    handles back to back, all outstanding at once on one connection. The software target
    runs them in order: each LOAD finds its block bound. An ALLOC_STORE served by the
    NIC releases the next credit once its Generation add has bound the entry, so the
    second allocation and the LOADs start before its COMPLETION. ``observe`` gets the
    server (``"server"``)."""
    bs = SCRIPTED_BS

    def steps(run: _Run, a: Any, note: Callable[[Any], Any]
              ) -> Generator[simpy.Event, Any, None]:
        for k in range(2):
            base = X_HANDLE + 2 * k
            procs = [a.alloc_store(base, b"1" * bs, seal=True),
                     a.alloc_store(base + 1, b"2" * bs, seal=True),
                     a.load(base, invalidate=False), a.load(base + 1, invalidate=False)]
            for res in (yield run.env.all_of(procs)).values():
                note(res)

    return _solo_script(Spec(seed=seed, profile=profile, ops=0, chains=chains), transform,
                        4, steps, observe)


def run_refused_alloc_then_load(profile: str = "ideal-be", seed: int = 1,
                                observe: dict[str, Any] | None = None,
                                chains: str = "v2", transform: Any = None,
                                rounds: int = 3) -> list[Divergence]:
    """Decision C19's condition made concrete: an ALLOC_STORE or STORE releases the next
    credit early only when the NIC served it. A owns a pool of one block; it allocates
    h, then sends, without waiting, an ALLOC_STORE of another handle (refused: the pool
    is empty, so the CPU answers it) and a LOAD of h. The CPU writes the refusal's
    COMPLETION into the allocation's CPU slots on the connection QP and then releases
    the gate; a chain that released it early (mutant ``v2-early-always``) lets the LOAD
    ENABLE the connection QP past those slots before the CPU has written them, and the
    refusal never reaches A. Since decision C25 a credit's master WAITs for its receive
    before the gate, so at window 1 the next request comes only after the COMPLETION:
    the mutant needs a request right behind. ``observe`` gets the server."""
    bs = SCRIPTED_BS

    def steps(run: _Run, a: Any, note: Callable[[Any], Any]
              ) -> Generator[simpy.Event, Any, None]:
        note((yield a.alloc_store(X_HANDLE, b"1" * bs, seal=True)))
        for k in range(rounds):
            procs = [a.alloc_store(X_HANDLE + 1 + k, b"2" * bs, seal=True),
                     a.load(X_HANDLE, invalidate=False)]
            for res in (yield run.env.all_of(procs)).values():
                note(res)

    return _solo_script(Spec(seed=seed, profile=profile, ops=0, chains=chains), transform,
                        1, steps, observe)


def run_unsealed_load_then_seal(profile: str = "ideal-be", seed: int = 1,
                                observe: dict[str, Any] | None = None,
                                chains: str = "v2", transform: Any = None,
                                rounds: int = 2) -> list[Divergence]:
    """Decision C31's guard made concrete: the LOAD's release behind its entry Read is
    opportunistic, and must do nothing where the CPU will answer the LOAD. A stores an
    unsealed block at h, then sends, without waiting, a LOAD of h without ALLOW_UNSEALED
    (the NIC's SEALED test fails: the CPU answers NOT_SEALED) and an inline STORE that
    seals h (on the NIC). The software target answers them in order; a release that
    ignored its markers (mutant ``v2-early-unguarded``) lets the STORE's chain run and
    send its COMPLETION before the CPU has answered the LOAD. ``rounds`` handles, one
    after the other, so that more than one credit slot serves the LOAD. ``observe`` gets
    the server."""
    bs = SCRIPTED_BS

    def steps(run: _Run, a: Any, note: Callable[[Any], Any]
              ) -> Generator[simpy.Event, Any, None]:
        for k in range(rounds):
            h = X_HANDLE + k
            note((yield a.alloc_store(h, b"1" * bs, seal=False)))
            procs = [a.load(h, invalidate=False),
                     a.store(h, b"2" * bs, inline=True, invalidate=False, seal=True)]
            for res in (yield run.env.all_of(procs)).values():
                note(res)

    return _solo_script(Spec(seed=seed, profile=profile, ops=0, chains=chains), transform,
                        rounds, steps, observe)


def run_generation_wrap(profile: str = "ideal-be", seed: int = 1,
                        observe: dict[str, Any] | None = None, chains: str = "v2",
                        transform: Any = None,
                        free_on_nic: bool = False) -> list[Divergence]:
    """The draft's "Generation" (never 0) across the wrap: A's handle h starts unbound at
    Generation 0xFFFE and h + 1 at 0xFFFF, in the live target and in the shadow (random
    campaigns never come near 0xFFFF). A allocates h (0xFFFF), frees it (the + 1 skips 0:
    1) and allocates it again (2); allocates h + 1 (0xFFFF + 1: 1), frees and allocates
    it (3); then LOADs both. Chains v1 skip 0 with a second add; chains v2 with native
    conditions hand an allocation at 0xFFFF to the CPU (decision C18), and a chain that
    does not (mutant ``v2-alloc-genwrap``) binds Generation 0. With ``free_on_nic``
    (decision C20) the FREE of h, at 0xFFFF, is handed to the CPU the same way (mutant
    ``v2-free-genwrap``: it unbinds to Generation 0). ``observe`` gets the server
    (``"server"``)."""
    from kbtpsim.target.table import TableEntry

    spec = Spec(seed=seed, profile=profile, ops=0, chains=chains, free_on_nic=free_on_nic)
    bs = SCRIPTED_BS
    run, a = _solo_run(spec, transform, 2)
    server = run.server
    for h, gen in ((X_HANDLE, 0xFFFE), (X_HANDLE + 1, 0xFFFF)):
        for table in (server.tap.table, run.shadow.target.table):
            table._put(h, TableEntry(generation=gen))
    note = partial(run.keep, a)

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield a.connect(server)
        run.new_connections()
        for h in (X_HANDLE, X_HANDLE + 1):
            note((yield a.alloc_store(h, b"1" * bs, seal=True)))
            note((yield a.free(h)))
            note((yield a.alloc_store(h, b"2" * bs, seal=True)))
        for h in (X_HANDLE, X_HANDLE + 1):
            note((yield a.load(h, invalidate=False)))
        if observe is not None:
            observe["server"] = server

    return _run_scripted(run, scenario())


def run_aliased_handles(profile: str = "ideal-be", seed: int = 1,
                        observe: dict[str, Any] | None = None, chains: str = "v2",
                        transform: Any = None) -> list[Divergence]:
    """Decision C21 (the receive places the handle's seven address octets into the
    LOAD's entry Read, its top octet beside Generation and Status): A stores a sealed
    block at h, then LOADs h, a handle whose top octet differs (its address octets are
    h's: a chain that does not test the top octet, mutant ``v2-load-recv-top``, serves
    h's block) and a handle outside the readable block (a Read that does not test the
    range, mutant ``v2-load-recv-unguarded``, reads outside the table's key), each twice
    so that every credit slot serves them. Random campaigns name unknown handles inside
    the range. ``observe`` gets the server (``"server"``)."""
    def steps(run: _Run, a: Any, note: Callable[[Any], Any]
              ) -> Generator[simpy.Event, Any, None]:
        note((yield a.alloc_store(X_HANDLE, b"1" * SCRIPTED_BS, seal=True)))
        for _ in range(2):
            for h in (X_HANDLE, 1 << 56 | X_HANDLE, X_HANDLE | 1 << 40):
                note((yield a.load(h, invalidate=False)))

    return _solo_script(Spec(seed=seed, profile=profile, ops=0, chains=chains), transform,
                        2, steps, observe)


__all__ = ["BLOCK", "Outcome", "run_aliased_handles", "run_allocs_then_loads",
           "run_generation_wrap",
           "run_interleaving", "run_load_during_free", "run_load_then_store",
           "run_unsealed_load_then_seal", "run_unsealed_loads"]
