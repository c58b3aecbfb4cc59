"""Scenario files: a strict, documented configuration tree for ``kbtpsim run``.

* :mod:`kbtpsim.scenario.schema`: the pydantic models (unknown keys rejected; units parsed
  by :mod:`kbtpsim.units`), everything importable from it; defined there (the top level)
  and in :mod:`~kbtpsim.scenario.fields` (quantities with units, the strict base),
  :mod:`~kbtpsim.scenario.target` (the target section) and
  :mod:`~kbtpsim.scenario.initiator` (initiators and workloads);
  :func:`~kbtpsim.scenario.rules.check` for the rules that span keys (quotas summing
  above F, features the binding forbids, ...).
* :mod:`kbtpsim.scenario.load`: YAML to a validated :class:`Scenario`, ``--set`` overrides
  with dotted paths and list indices, and errors as ``path: problem (did you mean 'x'?)``.
* :mod:`kbtpsim.scenario.docs`: docs/scenarios.md, generated from the schema.
"""

from kbtpsim.scenario.load import (
    ScenarioError,
    apply_overrides,
    load_scenario,
    parse_override,
    scenario_from_dict,
)
from kbtpsim.scenario.schema import Scenario

__all__ = [
    "Scenario",
    "ScenarioError",
    "apply_overrides",
    "load_scenario",
    "parse_override",
    "scenario_from_dict",
]
