"""The scenario's initiator section: an initiator host (``initiators[]``), the features
it requests and its workload (synthetic mix, lengths, popularity, KV cache,
misbehaviour).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from kbtpsim.scenario.fields import OpsRate, Size, Strict
from kbtpsim.scenario.target import NicSpec

#: Operations a synthetic workload can issue (keys of ``workload.mix``).
WorkloadOp = Literal["load", "store", "alloc_store", "free", "direct_load", "direct_alloc"]
DEFAULT_MIX: dict[WorkloadOp, float] = {"alloc_store": 1.0, "load": 4.0, "free": 1.0}

#: KV-cache presets: bytes of K and V per token at fp16 (layers x KV heads x head dim x
#: 2 (K and V) x 2 octets).
KV_MODELS: dict[str, int] = {
    "llama3-8b": 128 << 10,  # 32 layers x 8 KV heads x 128 x 2 x 2
    "llama3-70b": 320 << 10,  # 80 layers x 8 KV heads x 128 x 2 x 2
    "qwen3-8b": 144 << 10,  # 36 layers x 8 KV heads x 128 x 2 x 2
}


class InitiatorFeatures(Strict):
    """Features an initiator requests in HELLO (null: whatever the target offers)."""

    direct_load: bool | None = Field(None, description="Request DIRECT_LOAD.")
    direct_alloc: bool | None = Field(None, description="Request DIRECT_ALLOC.")
    record_completion: bool | None = Field(None, description="Request RECORD_COMPLETION.")


class Popularity(Strict):
    """Which handle (or KV-cache sequence) a request picks."""

    distribution: Literal["uniform", "zipf"] = Field("uniform", description="Handle "
                                                     "popularity.")
    exponent: float = Field(0.99, gt=0, description="Zipf exponent s (P(rank k) ~ k^-s).")


class LengthSpec(Strict):
    """Data length of stores (octets)."""

    distribution: Literal["fixed", "uniform", "choice", "block"] = Field(
        "fixed", description="`fixed` (value), `uniform` (min..max), `choice` "
        "(values, weights), `block` (the target's Block Size).")
    value: Size = Field(4096, description="Length for `fixed`.")
    min: Size = Field(1, description="Smallest length for `uniform`.")
    max: Size = Field(4096, description="Largest length for `uniform`.")
    values: list[Size] = Field(default_factory=list, description="Lengths for `choice`.")
    weights: list[float] = Field(default_factory=list, description="Weights for "
                                 "`choice` (default equal).")


class Misbehaviour(Strict):
    """A misbehaving initiator (draft, "Security Considerations")."""

    hoard_tickets: int = Field(0, ge=0, description="DIRECT_ALLOC tickets taken at the "
                               "start and never bound (the target reclaims them after "
                               "the Ticket Timeout and revokes the Partition STag).")
    invalid_fraction: float = Field(0.0, ge=0, le=1, description="Fraction of requests "
                                    "replaced by invalid ones.")
    invalid_kind: Literal["handle", "malformed"] = Field(
        "handle", description="`handle`: a LOAD outside every authorised range "
        "(INVALID_HANDLE); `malformed`: a request with undefined flag bits (MALFORMED).")


class KvCacheSpec(Strict):
    """KV-cache workload: prefill writes a sequence's blocks, decode loads them."""

    role: Literal["prefill", "decode"] = Field("prefill", description="`prefill` stores "
                                               "sequences; `decode` loads stored ones.")
    model: Literal["llama3-8b", "llama3-70b", "qwen3-8b", "custom"] = Field(
        "llama3-8b", description="Bytes-per-token preset at fp16: llama3-8b 128KiB, "
        "llama3-70b 320KiB, qwen3-8b 144KiB; `custom` uses bytes_per_token.")
    bytes_per_token: Size | None = Field(None, description="KV bytes per token (custom).")
    tokens_per_block: int = Field(16, ge=16, le=512, description="Tokens per KV block "
                                  "(16 to 512).")
    sequence_tokens_min: int = Field(256, ge=1, description="Shortest sequence (tokens).")
    sequence_tokens_max: int = Field(2048, ge=1, description="Longest sequence (tokens).")
    load_with: Literal["load", "direct_load"] = Field(
        "load", description="Decode: the operation that loads a block (`direct_load` "
        "needs target.features.direct_load).")
    store_with: Literal["alloc_store", "direct_alloc"] = Field(
        "alloc_store", description="Prefill: the operation that stores a block "
        "(`direct_alloc` needs target.features.direct_alloc; the block is not sealed).")

    @property
    def token_bytes(self) -> int:
        if self.model == "custom":
            return int(self.bytes_per_token or 0)
        return KV_MODELS[self.model]

    @property
    def block_bytes(self) -> int:
        return self.token_bytes * self.tokens_per_block


class WorkloadSpec(Strict):
    """What one initiator asks of its target."""

    kind: Literal["synthetic", "kvcache"] = Field("synthetic", description="`synthetic` "
                                                  "(mix of operations) or `kvcache`.")
    loop: Literal["closed", "open"] = Field("closed", description="`closed`: `window` "
                                            "requests outstanding; `open`: Poisson "
                                            "arrivals at `rate`.")
    window: int = Field(4, ge=1, le=65535, description="Closed loop: outstanding requests.")
    rate: OpsRate = Field(100_000.0, description="Open loop: mean arrivals per second.")
    mix: dict[WorkloadOp, float] = Field(
        default_factory=lambda: dict(DEFAULT_MIX),
        description="Relative weights of operations (load, store, alloc_store, free, "
        "direct_load, direct_alloc).")
    popularity: Popularity = Field(default_factory=Popularity,
                                   description="Handle popularity.")
    length: LengthSpec = Field(default_factory=LengthSpec, description="Store lengths.")
    inline_threshold: Size | None = Field(None, description="Stores of at most this many "
                                          "octets are sent inline (default: the target's "
                                          "max_inline; 0: never).")
    seal: bool = Field(True, description="Stores seal the block.")
    invalidate: bool = Field(True, description="Non-inline LOAD, STORE and ALLOC_STORE ask "
                             "for INVALIDATE: the completion revokes the request's buffer "
                             "window (Send with Invalidate); false: the initiator revokes "
                             "it itself after the completion.")
    direct_load_fallback: bool = Field(True, description="DIRECT_LOAD falls back to LOAD "
                                       "after failed attempts.")
    record: bool = Field(False, description="Ask for completion records (RECORD flag: the "
                         "target writes the completion with RDMA Write with Immediate; "
                         "needs RECORD_COMPLETION and the InfiniBand binding).")
    misbehave: Misbehaviour = Field(default_factory=Misbehaviour,
                                    description="Misbehaviour.")
    kvcache: KvCacheSpec = Field(default_factory=KvCacheSpec,
                                 description="KV-cache parameters (kind: kvcache).")

    @field_validator("mix")
    @classmethod
    def _positive_mix(cls, value: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in value.values()) or not any(w > 0 for w in value.values()):
            raise ValueError("weights must be >= 0 and at least one > 0")
        return value


class InitiatorSpec(Strict):
    """One initiator host (or ``count`` identical ones)."""

    name: str | None = Field(None, description="Host name (default `i<index>`); with "
                             "count > 1, hosts are `<name>.<k>`.")
    count: int = Field(1, ge=1, le=4096, description="Identical initiators made from "
                       "this entry.")
    target: str | None = Field(None, description="Name of the target to connect to "
                               "(default: `target.name`).")
    nic: NicSpec = Field(default_factory=NicSpec, description="The initiator's NIC.")
    quota: int | None = Field(None, ge=0, description="Allocation quota in blocks "
                              "(default: an equal share of F left by explicit quotas).")
    handles: int = Field(1024, ge=1, description="Handles in the initiator's range.")
    completion_credits: int = Field(64, ge=1, le=65535, description="Completion Credits.")
    buffers: Size | None = Field(None, description="Registered memory for the initiator's "
                                 "request buffers (default: room for 2 x (request credits "
                                 "+ window) blocks plus 1MiB, at most 256MiB; pages once "
                                 "touched stay allocated in the simulator).")
    trust_domain: str = Field("default", description="Trust domain (DIRECT_LOAD needs a "
                              "single one).")
    features: InitiatorFeatures = Field(default_factory=InitiatorFeatures,
                                        description="Features requested.")
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec, description="Workload.")
