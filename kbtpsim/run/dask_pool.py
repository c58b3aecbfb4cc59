"""Sweep points on Dask distributed: ``kbtpsim sweep SWEEP.yaml --dask ADDRESS|local``.

``ADDRESS`` is a running scheduler (``tcp://host:8786``, started with ``dask scheduler``;
workers join it with ``dask worker tcp://host:8786``, each on a machine with kbtpsim
installed). ``local`` starts a ``LocalCluster`` of ``jobs`` single-threaded worker
processes on this machine and closes it afterwards. Each point is one task; its result
comes back to the sweep's process, which writes the point's directory (workers need no
shared file system). A task that raises is reported as that point's failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: how long to wait for a remote scheduler to answer (seconds)
CONNECT_TIMEOUT_S = 10


class DaskUnavailable(RuntimeError):
    """Dask distributed is not installed, or the scheduler cannot be reached."""


def connect(address: str, workers: int) -> tuple[Any, Any]:
    """``(client, cluster)``: a client of the scheduler at ``address``, or of a new
    ``LocalCluster`` of ``workers`` processes for ``"local"`` (``cluster`` is then that
    cluster, to close; None otherwise)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise DaskUnavailable("Dask distributed is not installed (pip install "
                              "distributed)") from None
    if address == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=logging.ERROR)
        return Client(cluster), cluster
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise DaskUnavailable(f"cannot reach the Dask scheduler at {address!r}: "
                              f"{exc}") from None


def dask_map(fn: Callable[[Any], dict[str, Any]], items: list[T], arg: Callable[[T], Any],
             address: str, workers: int,
             failure: Callable[[BaseException], dict[str, Any]]
             ) -> Iterator[tuple[T, dict[str, Any]]]:
    """``(item, fn(arg(item)))`` as each task finishes (``failure(exc)`` if it raised)."""
    from distributed import as_completed

    client, cluster = connect(address, workers)
    try:
        futures = {client.submit(fn, arg(it), pure=False): it for it in items}
        for fut in as_completed(futures):
            item = futures[fut]
            try:
                yield item, fut.result()
            except Exception as exc:
                yield item, failure(exc)
            finally:
                fut.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
