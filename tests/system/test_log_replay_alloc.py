"""The log replay (``kbtpsim run --oracle``, decision R1) applies an allocation the NIC
served in two steps: its ticket at its FetchAdd on Head (``nic_hold``), the rest when its
entry turned VALID (``nic_slot``). A CPU LOAD of the handle in between answers NOT_VALID,
as the live target does (the entry is not VALID yet)."""

from __future__ import annotations

from kbtpsim.system import replay
from kbtpsim.target import InitiatorConfig, SendMessage, TargetConfig
from kbtpsim.wire import (
    AllocStore,
    Completion,
    DataDescriptor,
    Feature,
    Hello,
    Load,
    RequestFlag,
    Status,
    encode,
)

BS = 4096


def _log(alloc_steps: str) -> list[tuple[object, ...]]:
    ids = {"A": b"A" * 16, "B": b"B" * 16}
    hello = {n: encode(Hello(requested_features=Feature(0), completion_credits=8,
                             initiator_id=i), False) for n, i in ids.items()}
    alloc = encode(AllocStore(flags=RequestFlag.INLINE | RequestFlag.SEAL, request_id=1,
                              handle=0x100, data_descriptor=DataDescriptor(0, 0, BS),
                              inline_data=b"x" * BS), False)
    load = encode(Load(request_id=2, handle=0x100,
                       data_descriptor=DataDescriptor(7, 0, BS)), False)
    log: list[tuple[object, ...]] = [("connect", 1, 0), ("connect", 2, 0),
                                     ("handle", 1, hello["A"], 1), ("handle", 2, hello["B"], 2)]
    if alloc_steps == "two":
        log += [("nic_hold", 1, alloc, 10), ("handle", 2, load, 20),
                ("nic_slot", 1, alloc, 30)]
    else:
        log += [("nic", 1, alloc, 10), ("handle", 2, load, 20)]
    return log


def _completions(effects: list[object]) -> dict[int, Completion]:
    return {e.message.request_id: e.message for e in effects  # type: ignore[attr-defined]
            if isinstance(e, SendMessage) and isinstance(e.message, Completion)}


def test_a_load_between_the_ticket_and_the_entry_sees_it_unbound() -> None:
    config = TargetConfig(blocks=4, block_size=BS, max_inline=BS, initiators=(
        InitiatorConfig("A", b"A" * 16, 2, 0x100, 16),
        InitiatorConfig("B", b"B" * 16, 2, 0x200, 16)))
    _, effects = replay(config, _log("two"))
    got = _completions(effects)
    assert got[2].status is Status.NOT_VALID  # the LOAD, before the entry turned VALID
    assert got[1].status is Status.OK  # the allocation, completed at nic_slot
    _, effects = replay(config, _log("one"))
    assert _completions(effects)[2].status is Status.OK  # applied whole at its ticket
