"""Builders shared by the system-layer tests."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from kbtpsim.system import Cluster, Initiator
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.wire import Feature

BASE_A = 0x1000
BASE_B = 0x2000
NONE = Feature(0)


def ini_id(name: str, seed: int = 0) -> bytes:
    return Initiator.random_id(seed, name)


def config(*, blocks: int = 64, block_size: int = 4096, quota: int = 16,
           features: Feature = NONE, names: tuple[str, ...] = ("a",),
           **kw: Any) -> TargetConfig:
    inits = tuple(
        InitiatorConfig(name, ini_id(name), quota, 0x1000 * (i + 1), 256, features)
        for i, name in enumerate(names)
    )
    return TargetConfig(blocks=blocks, block_size=block_size, initiators=inits, **kw)


def run(cluster: Cluster, body: Callable[..., Generator[simpy.Event, Any, Any]],
        *args: Any) -> Any:
    """Connect every initiator, then run ``body(cluster, *args)`` to its end."""

    def work() -> Generator[simpy.Event, Any, Any]:
        yield cluster.connect_all()
        return (yield from body(cluster, *args))

    return cluster.run(work())


def connect_only(cluster: Cluster) -> None:
    """Connect every initiator and establish its session."""
    cluster.run(_connect(cluster))


def _connect(cluster: Cluster) -> Generator[simpy.Event, Any, None]:
    yield cluster.connect_all()
