"""``kbtpsim check --junit FILE.xml``: the campaigns as a JUnit XML report, for CI.

One ``<testsuite name="kbtpsim check">`` of one ``<testcase>`` per campaign: ``classname``
``kbtpsim.check.<profile>``, ``name`` ``seed S ADDR_LE on|off mix M`` (plus faults and
mutant when given). A campaign with a divergence has a ``<failure>`` whose ``message`` is
the first divergence's one-line summary and whose text is its decoded report (the one
``kbtpsim check`` prints); campaigns left out by ``--stop`` are ``<skipped>``.
``<system-out>`` holds each campaign's request counts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One campaign of the report: its spec and, if it ran, its result."""

    spec: Any  #: kbtpsim.oracle.campaign.Spec
    result: Any | None = None  #: kbtpsim.oracle.campaign.Result


def case_name(spec: Any, addr_le: bool | None) -> str:
    le = {True: "on", False: "off", None: "default"}[addr_le]
    name = f"seed {spec.seed} ADDR_LE {le} mix {spec.mix}"
    if spec.faults.names:
        name += f" faults {','.join(spec.faults.names)}"
    if spec.mutant:
        name += f" mutant {spec.mutant}"
    return name


def junit_xml(cases: list[Case], properties: dict[str, str] | None = None) -> bytes:
    """The report as UTF-8 XML."""
    from kbtpsim.oracle.report import describe, request_counts

    failures = sum(1 for c in cases if c.result is not None and c.result.divergences)
    skipped = sum(1 for c in cases if c.result is None)
    total_s = sum(c.result.wall_s for c in cases if c.result is not None)
    root = ET.Element("testsuites", name="kbtpsim", tests=str(len(cases)),
                      failures=str(failures), errors="0", skipped=str(skipped),
                      time=f"{total_s:.3f}")
    suite = ET.SubElement(root, "testsuite", name="kbtpsim check", tests=str(len(cases)),
                          failures=str(failures), errors="0", skipped=str(skipped),
                          time=f"{total_s:.3f}")
    if properties:
        props = ET.SubElement(suite, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", name=k, value=v)
    for c in cases:
        res = c.result
        addr_le = res.addr_le if res is not None else c.spec.addr_le
        tc = ET.SubElement(suite, "testcase", classname=f"kbtpsim.check.{c.spec.profile}",
                           name=case_name(c.spec, addr_le),
                           time=f"{res.wall_s:.3f}" if res is not None else "0")
        if res is None:
            ET.SubElement(tc, "skipped", message="not run: --stop after a divergence")
            continue
        if res.divergences:
            first = res.divergences[0]
            res.spec = replace(c.spec, addr_le=res.addr_le)
            text = describe(res, first)
            more = len(res.divergences) - 1
            if more:
                text += f"\n  ... and {more} more divergence(s) in that campaign"
            fail = ET.SubElement(tc, "failure", type=f"divergence.{first.kind}",
                                 message=f"{len(res.divergences)} divergence(s); first "
                                 f"({first.kind}): {first.detail}")
            fail.text = text
        out = ET.SubElement(tc, "system-out")
        out.text = (f"{request_counts(res).strip()}, "
                    f"{res.checkpoints} checkpoints, {len(res.divergences)} divergences")
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def write_junit(path: str | Path, cases: list[Case],
                properties: dict[str, str] | None = None) -> None:
    Path(path).write_bytes(junit_xml(cases, properties))
