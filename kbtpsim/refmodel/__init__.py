"""An independent reference: a second, small executable model of the draft's target-side
rules (docs/oracle.md, "The reference model").

:mod:`~kbtpsim.refmodel.model` (with its mixins :mod:`~kbtpsim.refmodel.lifecycle`,
:mod:`~kbtpsim.refmodel.operations` and :mod:`~kbtpsim.refmodel.returns`, and
:mod:`~kbtpsim.refmodel.constants`) and :mod:`~kbtpsim.refmodel.ring` are written from the
text of "KV Cache Block Transfer Protocol" over plain dicts, lists and integers; they use
only :mod:`kbtpsim.wire`, :mod:`kbtpsim.atomics` and :mod:`kbtpsim.errors`.
:mod:`~kbtpsim.refmodel.adapter` shows the model through the interface of
:class:`kbtpsim.target.Target` so the oracle can use it as its reference.
"""

from kbtpsim.refmodel.adapter import ModelTarget
from kbtpsim.refmodel.model import ModelInvariant, RefModel

__all__ = ["ModelInvariant", "ModelTarget", "RefModel"]
