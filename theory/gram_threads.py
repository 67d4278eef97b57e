"""The BLAS threads of the fast causal Gram state's attention layer (docs/theory.md section 8.1).

Its products are of chunks of query rows and thin factors, beside numba's own threads (the masked
softmax): with two OpenBLAS threads one layer of Llama 3.2 1B at T 2048 took 1.5x longer on a quiet
two-core machine and 6.5x on a busy one (benchmarks/bench_gram_threads.py). So the layer runs its BLAS
calls on :data:`BLAS_THREADS`, whatever the process's setting (``threadpoolctl``); the work estimates time
its products the same way.
"""
from __future__ import annotations

from threadpoolctl import threadpool_limits

__all__ = ["BLAS_THREADS", "gram_blas_threads"]

#: BLAS threads of one fast attention layer of the Gram states (read at each call of
#: :func:`gram_blas_threads`).
BLAS_THREADS = 1


def gram_blas_threads():
    """A context in which BLAS (numpy's and scipy's OpenBLAS) runs on :data:`BLAS_THREADS` threads."""
    return threadpool_limits(limits=BLAS_THREADS, user_api="blas")
