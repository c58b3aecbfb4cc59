"""Running scenarios: ``kbtpsim run``, ``kbtpsim sweep`` and ``kbtpsim plot``.

* :mod:`~kbtpsim.run.build`: the system of a scenario (kbtpsim.system on a network graph);
* :mod:`~kbtpsim.run.driver`: workload generators driven as simpy processes;
* :mod:`~kbtpsim.run.metrics`: probes (latency recorder, periodic sampler);
* :mod:`~kbtpsim.run.runner`: one run; :mod:`~kbtpsim.run.results`: its files;
* :mod:`~kbtpsim.run.oracle`: the ``--oracle`` self-check;
* :mod:`~kbtpsim.run.sweep`, :mod:`~kbtpsim.run.plot`, :mod:`~kbtpsim.run.cli`.
"""
