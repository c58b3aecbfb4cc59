"""Scripted connection failures on the offloaded target (decision O5): an initiator's
connection fails at a chosen moment of a chain, the server stops the chain and salvages
what it did, and the oracle compares the outcome with the reference (each run returns
its divergences)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any

import simpy

from kbtpsim.chains.lowering import RSTG
from kbtpsim.oracle.campaign import Pool, Spec, _Run
from kbtpsim.oracle.compare import Divergence
from kbtpsim.oracle.faults import DelayChain, Faults
from kbtpsim.oracle.interleaving import X_HANDLE, _owner_and_loader, _run_scripted


def run_drop_during_allocation(profile: str = "ideal-be", seed: int = 1,
                               observe: dict[str, Any] | None = None) -> list[Divergence]:
    """Decision O5 made deterministic: X's ALLOC_STORE runs in its chain; the moment the
    chain's FetchAdd on Head has landed, X's connection fails (``Initiator.close``). The
    server stops the chain, undoes what it wrote and finishes the allocation of its
    Ticket in software; then X reconnects and stores to the handle. The shadow is fed
    what the live target was told. ``observe`` gets the server (``"server"``) and X's
    STORE result (``"store"``)."""
    spec = Spec(seed=seed, profile=profile, ops=0)
    pool = Pool(initiators=(("X", X_HANDLE, "default", 2),), blocks=4, block_size=4096)
    run = _Run(spec, None, pool)
    env, server = run.env, run.server
    x = run.inis["X"]
    tickets = _head_tickets(run)

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield x.connect(server)
        run.new_connections()
        proc = x.alloc_store(X_HANDLE, b"X" * 4096, seal=True)
        while tickets() < 1:  # the chain holds its ticket
            yield env.timeout(100_000)
        yield from _drop_and_reconnect(run, x, proc)
        res = yield x.store(X_HANDLE, b"Y" * 4096, inline=True)
        run.keep(x, res)
        if observe is not None:
            observe["server"], observe["store"] = server, res

    return _run_scripted(run, scenario())


def run_drop_during_ticket(profile: str = "ideal-be", seed: int = 1,
                           chains: str = "v2",
                           observe: dict[str, Any] | None = None) -> list[Divergence]:
    """X's inline ALLOC_STORE: the moment its chain's FetchAdd on Head has started, before
    it reaches Head, X's connection fails at the target (the target closes it and stops
    the chains): the FetchAdd is flushed, having taken no Ticket. Its flushed CQE must
    not count as a Ticket taken (the chain server once read the untouched result
    buffer's sentinel as Ticket 0xFFFFFFFF, and linearised the events of every later
    Ticket before it; the CPU then finished an allocation with that Ticket:
    docs/oracle.md, Findings). ``observe`` gets the server (``"server"``) and the
    FetchAdd's completion status (``"fetch_add"``)."""
    run, x = _dropping_run(profile, seed, 4, 512, chains)
    env, server = run.env, run.server
    tickets = _head_tickets(run)

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield x.connect(server)
        run.new_connections()
        (conn,) = server.connections.values()
        cs = server.chain_server(conn)
        alloc = x.alloc_store(X_HANDLE, b"X" * 512, seal=True)
        fetch_add = None
        while fetch_add is None:  # the FetchAdd started: its context is pending
            for cr in cs.live.values():
                qp, idx = cr.index.get("ai_fa_head", (None, -1))
                if qp is not None and fetch_add is None:
                    fetch_add = next((c for c in qp.pending if c.index == idx), None)
            yield env.timeout(10)
        assert tickets() == 0, "the FetchAdd reached Head"
        server.close(conn, "failed")
        yield from _drop_and_reconnect(run, x, alloc)
        run.keep(x, (yield x.alloc_store(X_HANDLE + 1, b"Y" * 512, seal=True)))
        if observe is not None:
            observe["server"], observe["fetch_add"] = server, fetch_add.done.value

    return _run_scripted(run, scenario())


def _head_tickets(run: _Run) -> Callable[[], int]:
    """The Tickets taken so far on the shared ring's Head (its high half), read live."""
    server = run.server
    head = server.layout.rings[0].head_addr if server.layout else 0
    order = server.layout.counter_byte_order if server.layout else "big"
    mem = server.nic.host.memory
    return lambda: mem.read_u64(head, order) >> 32


def _other_work(server: Any, ps: int) -> Generator[simpy.Event, Any, None]:
    """Other work on one of the target's cores for ``ps`` (the server thread waits)."""
    with server.cpu.request() as core:
        yield core
        yield server.env.timeout(ps)


def _drop_and_reconnect(run: _Run, x: Any, proc: simpy.Process
                        ) -> Generator[simpy.Event, Any, None]:
    """X's connection fails now (``Initiator.close``) with ``proc`` in flight; once the
    target has salvaged it and processed the disconnect, X connects again."""
    env, server = run.env, run.server
    x.close()
    with contextlib.suppress(Exception):  # ConnectionLost: no completion can arrive
        yield proc
    yield env.timeout(50_000_000)  # the target salvages X's connection
    for _ in range(20):  # the target processes the disconnect on a core
        try:
            yield x.connect(server) if x.broken is not None else x.hello()
            break
        except Exception:
            yield env.timeout(20_000_000)
    run.new_connections()


def run_drop_during_load(profile: str = "ideal-be", seed: int = 1,
                         observe: dict[str, Any] | None = None) -> list[Divergence]:
    """Decision C20 with a failure: B's LOAD of A's sealed handle h counts itself a reader
    (its FetchAdd + 1 ran), is held before its data Write, and B's connection fails: its
    - 1 is flushed with the connection, so h's count stays raised. A's FREE of h
    afterwards is handed to the CPU, which quiesces it (C13): safe. ``observe`` gets the
    server (``"server"``)."""
    faults = Faults(delay=DelayChain("B", "load", "load_write", 100_000.0))
    spec = Spec(seed=seed, profile=profile, ops=0, faults=faults, chains="v2",
                free_on_nic=True)
    bs = 512
    run, a, b = _owner_and_loader(spec, None, 2, bs)
    env, server = run.env, run.server

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield env.all_of([a.connect(server), b.connect(server)])
        run.new_connections()
        run.keep(a, (yield a.alloc_store(X_HANDLE, b"1" * bs, seal=True)))
        load = b.load(X_HANDLE, invalidate=False)
        yield env.timeout(30_000_000)  # B's chain counted itself, waits at its Write
        b.close()
        with contextlib.suppress(Exception):  # ConnectionLost: no completion can arrive
            yield load
        yield env.timeout(50_000_000)  # the target salvages B's connection
        run.keep(a, (yield a.free(X_HANDLE)))
        if observe is not None:
            observe["server"] = server

    return _run_scripted(run, scenario())


def _dropping_run(profile: str, seed: int, blocks: int, block_size: int,
                  chains: str = "v1", transform: Any = None) -> tuple[_Run, Any]:
    """A scripted run of initiator X (quota 2) whose script drops X's connection itself
    (``drop_p`` set: a connection failure at the target is no divergence)."""
    spec = Spec(seed=seed, profile=profile, ops=0, faults=Faults(drop_p=1.0), chains=chains)
    pool = Pool(initiators=(("X", X_HANDLE, "default", 2),), blocks=blocks,
                block_size=block_size)
    run = _Run(spec, transform, pool)
    return run, run.inis["X"]


def _staging_firsts(run: _Run) -> list[int]:
    """The first octet of every credit slot's staging buffer for a Read-source store's
    data (decision C24) on the run's chain connections (none if no chain stages)."""
    server = run.server
    out = []
    for conn in getattr(server, "connections", {}).values():
        cs = server.chain_server(conn)
        out += [a for s in range(cs.credits)
                if (a := cs._buffer_addrs(s).get(RSTG)) is not None]
    return out


def run_drop_after_store_read(profile: str = "ideal-be", seed: int = 1,
                              observe: dict[str, Any] | None = None,
                              block_size: int = 4096,
                              first_packet: bool = False, chains: str = "v1",
                              during_copy: bool = False, transform: Any = None,
                              busy_ns: float = 0.0) -> list[Divergence]:
    """Decision O5 for a Read-source STORE: X stores new data to its unsealed handle with a
    Read source; the moment the chain's data Read has placed the last octet in the bound
    block (the chains read straight into it), X's connection fails, so the chain's
    COMPLETION Send fails and nothing after it runs. The salvage once forgot the STORE
    and left the block holding octets the target never wrote; it now serves the STORE
    again with the octets already read. X reconnects and LOADs the handle.
    ``first_packet``: the connection fails once the Read's *first* octet has landed
    instead (with a block of several packets a chain's Read, cut there, left part of the
    new octets in the block; the CPU now serves such a STORE, rule ``torn-read``).
    With ``chains="v2"`` and a block of several packets the chain reads into staging
    (decision C24): ``first_packet`` then cuts the Read in staging, and ``during_copy``
    cuts the copy from staging into the block once its first octet has landed.
    ``busy_ns``: the target's cores are taken by other work (as with
    ``target.cpu.background``) for that long from the failure on, so its CPU stops the
    chains only after the cut Read's flushed CQE has let them run on.
    ``observe`` gets the server (``"server"``) and the LOAD's result (``"load"``)."""
    bs = block_size
    run, x = _dropping_run(profile, seed, 4, bs, chains, transform)
    env, server = run.env, run.server
    mem = server.nic.host.memory

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield x.connect(server)
        run.new_connections()
        res = run.keep(x, (yield x.alloc_store(X_HANDLE, b"A" * bs,
                                               inline=bs <= 4096)))
        assert server.layout is not None
        block = server.layout.block_addr(res.completion.block_offset)
        staging = [] if during_copy else _staging_firsts(run)
        if staging:  # where the chain's Read lands (C24): its first or last octet
            watch = staging if first_packet else [a + bs - 1 for a in staging]
        else:
            watch = [block if first_packet or during_copy else block + bs - 1]
        store = x.store(X_HANDLE, b"B" * bs, inline=False)
        while all(mem.read(a, 1) != b"B" for a in watch):  # the data Read has placed it
            yield env.timeout(100)
        for _ in range(server.cpu.cores if busy_ns else 0):
            env.process(_other_work(server, round(busy_ns * 1000)))
        yield from _drop_and_reconnect(run, x, store)
        res = run.keep(x, (yield x.load(X_HANDLE, allow_unsealed=True)))
        if observe is not None:
            observe["server"], observe["load"] = server, res

    return _run_scripted(run, scenario())


def run_drop_during_alloc_read(profile: str = "ideal-be", seed: int = 1,
                               observe: dict[str, Any] | None = None,
                               block_size: int = 256 * 1024, chains: str = "v1",
                               during_copy: bool = False) -> list[Divergence]:
    """Decision O5 for an allocation: X's Read-source ALLOC_STORE of a block of several
    packets; X's connection fails once the Read's first octet has landed. A chain read
    straight into the block it took, so the salvage finished the allocation and the
    disconnect returned the block to the ring holding part of X's octets, where the
    software target, reading into staging, left it as it was; the CPU now serves such
    an allocation (rule ``torn-read``). ``observe`` gets the server
    (``"server"``). With ``chains="v2"`` the chain stages its Read (decision C24): the
    failure cuts the Read in staging, or, ``during_copy``, the copy into the block.
    """
    bs = block_size
    run, x = _dropping_run(profile, seed, 2, bs, chains)
    env, server = run.env, run.server
    mem = server.nic.host.memory

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield x.connect(server)
        run.new_connections()
        assert server.layout is not None
        firsts = [] if during_copy else _staging_firsts(run)  # C24: where the Read lands
        firsts = firsts or [server.layout.block_addr(b * bs) for b in range(2)]
        alloc = x.alloc_store(X_HANDLE, b"B" * bs, inline=False)
        while all(mem.read(a, 1) != b"B" for a in firsts):  # its Read has begun to land
            yield env.timeout(100)
        yield from _drop_and_reconnect(run, x, alloc)
        run.keep(x, (yield x.alloc_store(X_HANDLE + 1, b"C" * 100, inline=True)))
        if observe is not None:
            observe["server"] = server

    return _run_scripted(run, scenario())



def run_drop_during_free_return(profile: str = "ideal-be", seed: int = 1,
                                observe: dict[str, Any] | None = None) -> list[Divergence]:
    """Decision C20 with a failure between the two writes of a block's return: A's FREE
    (on the NIC) took its Tail ticket, found the ticket's slot consumed and wrote its
    Block Offset, and is held before the Sequence (``fr_w_seq``) when A's connection
    fails. The slot then holds the old round's Sequence beside the freed block, which
    reads as a slot still waiting for its allocation: the target must see that the chain
    found it consumed, so that the return completes and the allocation of that ticket
    does not wait for ever. A then reconnects and allocates twice (the second takes the
    returned slot's ticket). ``observe`` gets the server (``"server"``)."""
    faults = Faults(delay=DelayChain("A", "free", "fr_w_seq", 100_000.0), drop_p=1.0)
    spec = Spec(seed=seed, profile=profile, ops=0, faults=faults, chains="v2",
                free_on_nic=True)
    bs = 512
    run, a, _b = _owner_and_loader(spec, None, 2, bs)
    env, server = run.env, run.server
    assert server.layout is not None
    ring = server.layout.rings[0]
    mem = server.nic.host.memory

    def scenario() -> Generator[simpy.Event, Any, None]:
        yield a.connect(server)
        run.new_connections()
        run.keep(a, (yield a.alloc_store(X_HANDLE, b"1" * bs, seal=True)))  # Ticket 0
        slot = ring.slot_addr(0)  # Tail ticket 2 returns the block to slot 0 (N = 2)
        before = mem.read(slot + 8, 8)
        proc = a.free(X_HANDLE)
        while mem.read(slot + 8, 8) == before:  # the chain's Block Offset has landed
            yield env.timeout(100_000)
        yield from _drop_and_reconnect(run, a, proc)
        for handle in (X_HANDLE + 1, X_HANDLE + 2):  # Tickets 1 and 2
            run.keep(a, (yield a.alloc_store(handle, b"2" * bs, seal=True)))
        if observe is not None:
            observe["server"] = server

    return _run_scripted(run, scenario())


__all__ = ["run_drop_after_store_read", "run_drop_during_alloc_read",
           "run_drop_during_allocation", "run_drop_during_free_return", "run_drop_during_load"]
