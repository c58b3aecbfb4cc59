"""Session establishment, GOODBYE, reconnection, connection failure."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.system import Cluster, ConnectionLost, HelloRejected, RdmaError
from kbtpsim.wire import Status
from tests.system.helpers import BASE_A, config, connect_only, ini_id, run


def test_hello_ack_describes_the_session() -> None:
    cluster = Cluster.build(config(quota=7, request_credits=12))
    connect_only(cluster)
    ack = cluster.initiators["a"].ack
    assert ack is not None
    assert (ack.request_credits, ack.allocation_quota, ack.handle_base, ack.handle_count,
            ack.block_size) == (12, 7, BASE_A, 256, 4096)


def test_unknown_initiator_is_rejected() -> None:
    cluster = Cluster.build(config(), initiators=[])
    stranger = cluster.add_initiator("stranger")

    def work() -> Generator[Any, Any, None]:
        with pytest.raises(HelloRejected) as info:
            yield stranger.connect(cluster.server)
        assert info.value.status == Status.INVALID_HANDLE

    cluster.run(work())


def test_reconnect_with_the_same_initiator_id_restores_bindings() -> None:
    cluster = Cluster.build(config())

    def body(c: Cluster) -> Generator[Any, Any, Any]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"persist", seal=True)
        # a second connection with the same ID while the session is active: refused
        twin = c.add_initiator("twin", initiator_id=ini_id("a"))
        with pytest.raises(HelloRejected) as info:
            yield twin.connect(c.server)
        assert info.value.status == Status.ALREADY_BOUND
        yield a.goodbye()
        a.close()
        with pytest.raises(ConnectionLost):
            yield a.load(BASE_A)
        # a new host with the same Initiator ID gets the bindings back
        again = c.add_initiator("again", initiator_id=ini_id("a"))
        yield again.connect(c.server)
        res = yield again.load(BASE_A)
        # and the original initiator object can reconnect too, after `again` leaves
        yield again.goodbye()
        again.close()
        yield a.connect(c.server)
        res2 = yield a.load(BASE_A)
        return res, res2

    res, res2 = run(cluster, body)
    assert res.ok and res.data == b"persist"
    assert res2.ok and res2.data == b"persist"


def test_goodbye_with_release_frees_everything() -> None:
    cluster = Cluster.build(config())

    def body(c: Cluster) -> Generator[Any, Any, Any]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"gone", seal=True)
        yield a.goodbye(release=True)
        yield a.hello()  # a new session on the same connection
        return (yield a.load(BASE_A))

    res = run(cluster, body)
    assert res.status == Status.NOT_VALID
    assert cluster.server.target.stats().quotas[0].usage == 0


def test_access_without_an_stag_fails_as_hardware_does() -> None:
    cluster = Cluster.build(config())

    def body(c: Cluster) -> Generator[Any, Any, Any]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"secret", seal=True)
        pool_addr = c.server.nic.host.alloc(64)
        with pytest.raises(RdmaError) as info:
            yield a.read_remote(0x1234_5600, pool_addr, 16)  # an STag it was never given
        assert info.value.status.name == "REM_ACCESS_ERR"
        with pytest.raises(ConnectionLost):
            yield a.load(BASE_A)
        yield c.sim.env.timeout(50_000_000)  # let the server notice
        return None

    run(cluster, body)
    conn = cluster.initiators["a"].conn
    assert conn is not None and conn.ended is not None
    sess = cluster.server.target.initiators["a"]
    assert not sess.active and sess.retained_until is not None  # bindings retained


def test_outstanding_requests_fail_cleanly_when_the_connection_breaks() -> None:
    cluster = Cluster.build(config(block_size=1 << 20, blocks=8, quota=8))

    def body(c: Cluster) -> Generator[Any, Any, list[str]]:
        a = c.initiators["a"]
        env = c.sim.env

        def guarded(proc: Any) -> Generator[Any, Any, str]:
            try:
                res = yield proc
            except ConnectionLost:
                return "lost"
            return str(res.status)

        outcomes = [env.process(guarded(a.alloc_store(BASE_A + i, bytes(1 << 20),
                                                      inline=False))) for i in range(4)]
        yield env.timeout(20_000_000)  # 20 us: the target is RDMA-reading the first one
        with pytest.raises(RdmaError):
            yield a.read_remote(0xBAD_0000, 0, 8)
        got = yield env.all_of(outcomes)
        yield env.timeout(1_000_000_000)  # the server notices and cleans up
        return [got[p] for p in outcomes]

    outcomes = run(cluster, body)
    assert "lost" in outcomes
    sess = cluster.server.target.initiators["a"]
    assert not sess.active
    assert sess.tickets == 0  # blocks held for RDMA Read data went back
    cluster.server.target.check_invariant()
    assert cluster.initiators["a"].buffers.outstanding == 0


def test_the_target_learns_of_a_disconnect_after_the_cm_delay() -> None:
    """Decision O11: a CM disconnect (DREQ) reaches the target CM_DISCONNECT_PS after the
    initiator's close, after what its NIC sent before (the ACKs of the last COMPLETION)."""
    from kbtpsim.system.initiator import CM_DISCONNECT_PS

    cluster = Cluster.build(config())
    seen: dict[str, Any] = {}

    def body(c: Cluster) -> Generator[Any, Any, Any]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"kept", seal=True)
        conn = next(iter(c.server.connections.values()))
        a.close()
        seen["at_close"] = conn.up
        yield c.sim.env.timeout(CM_DISCONNECT_PS - 1)
        seen["just_before"] = conn.up
        yield c.sim.env.timeout(2)
        seen["after"] = (conn.up, conn.ended)
        return None

    run(cluster, body)
    assert seen["at_close"] and seen["just_before"]
    assert seen["after"] == (False, "closed")
