"""Reading the YAML files users write (scenarios, sweeps, replay scripts) strictly.

PyYAML keeps the last of two equal keys in a mapping; :func:`load_yaml` refuses them
instead (:class:`DuplicateKey`, naming the key path and both lines), because the value
silently lost is a classic way to run something other than what was written.
Foundation-level: knows nothing of the files' meaning.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKey(yaml.YAMLError):
    """A key given twice in one mapping; ``path`` is its key path (``target.blocks``)."""

    def __init__(self, path: str, first_line: int, line: int) -> None:
        super().__init__(f"duplicate key at line {line} (first at line {first_line}; "
                         "YAML would silently keep only the last)")
        self.path = path
        self.first_line = first_line
        self.line = line


def _check(node: yaml.Node, path: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = key_node.value
            here = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(here, seen[key], line)
            seen[key] = line
            _check(value_node, here)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check(item, f"{path}[{i}]")


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that rejects duplicate keys (:class:`DuplicateKey`)."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is not None:
        _check(node, "")
    return yaml.safe_load(text)
