"""Differential validation of the offloaded target (``kbtpsim.chains``) against the
software target (``kbtpsim.target``), proven by mutation (``docs/oracle.md``).

* :mod:`~kbtpsim.oracle.events`: what is recorded (target calls, chain WRs) and the
  linearisation of requests;
* :mod:`~kbtpsim.oracle.node`: the observed offloaded server and initiators;
* :mod:`~kbtpsim.oracle.shadow`: the dict-backed software target run in lockstep;
* :mod:`~kbtpsim.oracle.compare`, :mod:`~kbtpsim.oracle.report`: divergences, and the
  first one readably;
* :mod:`~kbtpsim.oracle.faults`: delays, stalls, reordering, dropped connections, rogue
  DIRECT_ALLOC tickets;
* :mod:`~kbtpsim.oracle.campaign`: randomised campaigns (``kbtpsim check``), made of
  :mod:`~kbtpsim.oracle.spec` (a campaign's spec and result, the mixes),
  :mod:`~kbtpsim.oracle.actor` (one initiator's requests) and
  :mod:`~kbtpsim.oracle.lockstep` (the run and its checkpoints);
* :mod:`~kbtpsim.oracle.mutants`: the chain-bug catalogue (``kbtpsim mutants``); the
  bugs' chain transformations are in :mod:`~kbtpsim.oracle.transforms`.
"""

from kbtpsim.oracle.campaign import MIXES, PROFILES, Result, Spec, run_campaign

__all__ = ["MIXES", "PROFILES", "Result", "Spec", "run_campaign"]
