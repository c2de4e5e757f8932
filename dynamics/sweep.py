"""Parameter sweeps: run one function over many configurations, in local processes or on a Dask cluster."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os

from tqdm.auto import tqdm

from dynamics.validation import check_int


def sweep(fn, configs, *, processes: int | None = 1, client=None, progress: bool = False) -> list:
    """Evaluate ``fn(config)`` for every config and return the results in the order of ``configs``.

    Parameters
    ----------
    fn : a picklable top-level function (it is sent to worker processes by the standard library's process pool;
        results travel back the same way, so return arrays, Datasets or plain values).
    configs : iterable of arguments.
    processes : number of local worker processes (1 = run in this process, in order; None = ``os.cpu_count()``).
    client : a ``dask.distributed.Client``; when given, work is submitted to its cluster instead.
    progress : tqdm progress bar over configurations.
    """
    configs = list(configs)
    if client is not None:
        futures = client.map(fn, configs)
        return client.gather(futures)
    n_proc = os.cpu_count() or 1 if processes is None else check_int("processes", processes, min_value=1)
    if n_proc == 1 or len(configs) <= 1:
        return [fn(c) for c in tqdm(configs, disable=not progress, desc="sweep", leave=False)]
    ctx = multiprocessing.get_context("spawn")  # numba/torch state is not fork-safe
    results = [None] * len(configs)
    with cf.ProcessPoolExecutor(max_workers=n_proc, mp_context=ctx) as pool:
        futures = {pool.submit(fn, c): i for i, c in enumerate(configs)}
        for fut in tqdm(cf.as_completed(futures), total=len(configs), disable=not progress, desc="sweep",
                        leave=False):
            results[futures[fut]] = fut.result()
    return results
