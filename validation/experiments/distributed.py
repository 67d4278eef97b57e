"""Running sweep cells on a dask.distributed cluster.

* :func:`dask_client` -- a client of a new ``LocalCluster`` (worker processes with one
  thread each: torch parallelism stays inside a worker's own thread budget) or of a
  running cluster given by its scheduler address;
* :func:`map_cells` -- submit one task per cell and hand each result to a callback as
  soon as it arrives (in completion order), so the caller can write it to disk at once;
* :func:`worker_device` -- the torch device of the worker a task runs on.

Tasks are not retried here: a task whose worker dies is rescheduled by dask itself, and
the caller writes each cell atomically, so a cell is on disk at most once.

Needs the ``distributed`` extra (``pip install 'remprop[distributed]'``); nothing here
is imported by ``import remprop.validation``.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import uuid

__all__ = ["dask_installed", "dask_client", "map_cells", "worker_device", "worker_count", "describe",
           "INSTALL_HINT"]

INSTALL_HINT = "pip install 'remprop[distributed]'"


def dask_installed() -> bool:
    """Whether ``dask.distributed`` can be imported."""
    return importlib.util.find_spec("distributed") is not None and importlib.util.find_spec("dask") is not None


@contextlib.contextmanager
def dask_client(scheduler=None, workers=1, *, timeout=20):
    """A dask client, closed (with its LocalCluster) on exit.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``). When None, a
        ``LocalCluster`` is started: ``workers`` processes, one thread each, no
        dashboard, logs above warnings only.
    workers : int
        Worker processes of the LocalCluster (>= 1).
    timeout : float
        Seconds to wait for a scheduler to answer.

    Raises
    ------
    ValueError
        The scheduler cannot be reached (message names ``scheduler``).
    """
    from dask.distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=timeout)
        except (OSError, TimeoutError, ValueError) as err:
            reason = " ".join(str(err).split()) or type(err).__name__
            raise ValueError(f"scheduler: cannot connect to {scheduler!r} ({reason})") from None
        try:
            yield client
        finally:
            client.close()
        return
    cluster = LocalCluster(n_workers=max(int(workers), 1), threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=logging.ERROR)
    try:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def map_cells(client, function, argument_tuples, on_result) -> int:
    """Run ``function(*args)`` for each tuple on the cluster; ``on_result(value)`` as each ends.

    Results are handled in completion order, in this process. If ``on_result`` or a
    task raises, every task not yet finished is cancelled and the exception propagates.

    Returns
    -------
    int
        Number of results handled.
    """
    from dask.distributed import as_completed

    batch = uuid.uuid4().hex[:12]
    futures = [client.submit(function, *args, key=f"remprop-cell-{batch}-{k}", pure=False)
               for k, args in enumerate(argument_tuples)]
    handled = 0
    try:
        for future in as_completed(futures):
            on_result(future.result())
            handled += 1
    except BaseException:
        client.cancel([f for f in futures if not f.done()])
        raise
    return handled


def worker_count(client) -> int:
    """Number of workers the client's scheduler knows now."""
    return len(client.scheduler_info().get("workers", {}))


def describe(client, scheduler=None) -> str:
    """One-line description: local or remote, worker count."""
    where = f"scheduler {scheduler}" if scheduler else "LocalCluster"
    return f"{where}, {worker_count(client)} worker(s)"


def worker_device(device=None) -> str:
    """The device a task simulates on, chosen on the worker that runs it.

    ``None``/``"auto"``: ``cuda:k`` when the worker sees GPUs (``k`` = the worker's
    number, when its name is one, modulo the GPU count; else 0), otherwise ``"cpu"``.
    Any other value is returned unchanged.
    """
    if device not in (None, "auto"):
        return str(device)
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    index = 0
    try:
        from dask.distributed import get_worker

        name = get_worker().name
        index = int(name) if str(name).lstrip("-").isdigit() else 0
    except (ImportError, ValueError):
        index = 0
    return f"cuda:{index % torch.cuda.device_count()}"
