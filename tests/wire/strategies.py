"""Hypothesis strategies for every KBTP message and memory structure."""

from __future__ import annotations

from hypothesis import strategies as st

from kbtpsim.wire import (
    AllocStore,
    Bind,
    Completion,
    CompletionDescriptor,
    CompletionRecord,
    DataDescriptor,
    DirectDescriptor,
    EntryFlag,
    Feature,
    Free,
    Goodbye,
    GoodbyeFlag,
    Hello,
    HelloAck,
    Load,
    RequestFlag,
    RingSlot,
    Status,
    Store,
    TableEntry,
)

u16 = st.integers(0, 2**16 - 1)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
statuses = st.one_of(st.sampled_from(list(Status)), u16)

data_descriptors = st.builds(DataDescriptor, u32, u64, u32)
completion_descriptors = st.builds(CompletionDescriptor, u32, u64)
direct_descriptors = st.builds(DirectDescriptor, u32, u64, u32)


def _header(flags: st.SearchStrategy[int]) -> dict[str, st.SearchStrategy[object]]:
    return {
        "flags": flags,
        "request_id": u64,
        "handle": u64,
        "generation": u16,
        "status": statuses,
    }


# Request flags without INLINE/RECORD, which the strategies below set consistently.
_free_request_flags = st.integers(0, 2**16 - 1).map(
    lambda v: RequestFlag(v & ~(RequestFlag.INLINE | RequestFlag.RECORD))
)


@st.composite
def loads(draw: st.DrawFn) -> Load:
    flags = draw(_free_request_flags)
    cd = draw(st.none() | completion_descriptors)
    if cd is not None:
        flags |= RequestFlag.RECORD
    header = {k: draw(v) for k, v in _header(st.just(flags)).items()}
    return Load(**header, data_descriptor=draw(data_descriptors), completion_descriptor=cd)


@st.composite
def store_requests(draw: st.DrawFn, cls: type[Store] | type[AllocStore]) -> Store | AllocStore:
    flags = draw(_free_request_flags)
    cd = draw(st.none() | completion_descriptors)
    if cd is not None:
        flags |= RequestFlag.RECORD
    inline = draw(st.none() | st.binary(max_size=64))
    if inline is not None:
        flags |= RequestFlag.INLINE
        dd = DataDescriptor(0, 0, len(inline))
    else:
        dd = draw(data_descriptors)
    header = {k: draw(v) for k, v in _header(st.just(flags)).items()}
    return cls(**header, data_descriptor=dd, completion_descriptor=cd, inline_data=inline)


@st.composite
def frees(draw: st.DrawFn) -> Free:
    flags = draw(_free_request_flags)
    cd = draw(st.none() | completion_descriptors)
    if cd is not None:
        flags |= RequestFlag.RECORD
    header = {k: draw(v) for k, v in _header(st.just(flags)).items()}
    return Free(**header, completion_descriptor=cd)


@st.composite
def hello_acks(draw: st.DrawFn) -> HelloAck:
    features = Feature(draw(u16))
    extra: dict[str, object] = {}
    if features & Feature.DIRECT_LOAD:
        extra.update(
            table=draw(direct_descriptors),
            table_base_handle=draw(u64),
            pool=draw(direct_descriptors),
        )
    if features & Feature.DIRECT_ALLOC:
        extra.update(
            partition=draw(direct_descriptors),
            ring=draw(direct_descriptors),
            head=draw(direct_descriptors),
        )
    header = {k: draw(v) for k, v in _header(u16).items()}
    return HelloAck(
        **header,
        features=features,
        request_credits=draw(u16),
        block_size=draw(u32),
        max_inline=draw(u32),
        allocation_quota=draw(u32),
        handle_base=draw(u64),
        handle_count=draw(u32),
        ticket_timeout_ms=draw(u32),
        **extra,
    )


hellos = st.builds(
    Hello,
    **_header(u16),
    requested_features=u16.map(Feature),
    completion_credits=u16,
    initiator_id=st.binary(min_size=16, max_size=16),
)
binds = st.builds(Bind, **_header(u16), ticket=u32, data_length=u32, block_offset=u64)
completions = st.builds(Completion, **_header(u16), data_length=u32, block_offset=u64)
goodbyes = st.builds(Goodbye, **_header(u16.map(GoodbyeFlag)))

MESSAGE_STRATEGIES = {
    "HELLO": hellos,
    "HELLO_ACK": hello_acks(),
    "LOAD": loads(),
    "STORE": store_requests(Store),
    "ALLOC_STORE": store_requests(AllocStore),
    "FREE": frees(),
    "BIND": binds,
    "COMPLETION": completions,
    "GOODBYE": goodbyes,
}
messages = st.one_of(*MESSAGE_STRATEGIES.values())

table_entries = st.builds(TableEntry, u16.map(EntryFlag), u16, u32, u64)
ring_slots = st.builds(RingSlot, u32, u64)
completion_records = st.builds(CompletionRecord, u64, statuses, u16, u32, u64)
