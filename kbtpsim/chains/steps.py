"""What the chain builder's step mixins (:mod:`.variants`, :mod:`.load_direct`,
:mod:`.alloc`) share: the builder's state they read and, for type checking, the helpers
they call, provided by the builder (:mod:`kbtpsim.chains.compiler`) or by
:class:`~kbtpsim.chains.variants.VariantSteps`. Nothing here exists at run time but the
annotations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbtpsim.chains.ir import Chain, CondSpec, Order, Place, Placed, Read, WrTemplate
from kbtpsim.chains.vocab import Geometry, Variant


class StepHelpers:
    """The builder's state and helpers, as the step mixins see them."""

    chain: Chain
    geo: Geometry
    ro: Order
    ao: Order
    arm_producers: dict[str, list[str]]
    alt_producers: dict[str, list[str]]
    lowering: str
    recv_handle: bool
    recv_wqe: str

    if TYPE_CHECKING:
        # the builder's (kbtpsim.chains.compiler)
        def add(self, wr: WrTemplate) -> WrTemplate: ...
        def _move_last(self, name: str) -> None: ...
        def marker(self, name: str, part: str, step: int, loc: str,
                   producers: tuple[str, ...], compare: bytes, mask: bytes, about: str,
                   arm: str, slot: int, word_order: Order = "octets",
                   compare_source: Placed | None = None) -> None: ...
        def patch(self, name: str, part: str, step: int, src: list[tuple[str, int, str]],
                  dest: str, what: str, order: Order, producers: tuple[str, ...],
                  offset: int = 0, extra: tuple[Place, ...] = ()) -> None: ...
        def armed(self, v: Variant, n_markers: int) -> CondSpec: ...
        def read_ok_marker(self, v: Variant, read: str, step: int, arm: str,
                           slot: int) -> str: ...
        # VariantSteps' staged Read source (decision C24)
        def staging_read(self, v: Variant, name: str, step: int, cond: CondSpec) -> None: ...
        def staged_copy(self, v: Variant, name: str, read: str, step: int, bo_patch: str,
                        bo_what: str, cond: CondSpec) -> None: ...
        def _handle_src(self) -> tuple[str, int, str]: ...
        def _shift_at(self) -> int: ...
        def _handle_window(self, block: tuple[int, int]) -> tuple[str, bytes, bytes]: ...
        def _top_test(self, block: tuple[int, int]) -> tuple[int, int]: ...
        # DirectLoadSteps' (kbtpsim.chains.load_direct)
        def _load_direct(self, v: Variant) -> bool: ...
        def _reader_count(self, v: Variant, up: bool, step: int, raddr: Placed,
                          cond: CondSpec, note: str) -> None: ...
        # RecvLoadSteps' (kbtpsim.chains.load_recv, decision C21)
        def _load_markers(self, v: Variant,
                          tests: list[tuple[str, str, tuple[str, ...], bytes, bytes, str]]
                          ) -> None: ...
        def _v_load_recv(self, v: Variant) -> None: ...
        # VariantSteps' (kbtpsim.chains.variants)
        def _cqe_marker(self) -> bool: ...
        @staticmethod
        def _flag_cond(flag: int, is_set: bool, about: str) -> CondSpec: ...
        def _completion(self, v: Variant, name: str, step: int, length_src: Read | None,
                        bo_loc: str, bo_producers: tuple[str, ...],
                        generation: Read | None = None,
                        block_offset: tuple[Read, ...] = (),
                        cond: CondSpec | None = None, patch_step: int = 1) -> None: ...
        def _commit(self, v: Variant, step: int, cond: CondSpec | None = None) -> None: ...
        def _early_release(self, v: Variant, step: int, cond: CondSpec) -> None: ...


__all__ = ["StepHelpers"]
