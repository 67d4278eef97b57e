"""Where and in what precision the simulations run, and their random streams.

Every random draw of :mod:`remprop.validation` comes from an explicit
:class:`torch.Generator` seeded from ``(seed, stream, index)`` through NumPy's
:class:`~numpy.random.SeedSequence`, never from the global torch seed. The weights of
layer ``l`` of seed ``s`` are therefore the same whether or not the earlier layers were
drawn, and no two streams overlap. A generator lives on the device it draws for, so the
numbers depend on ``(seed, device)``: CPU and CUDA runs of one seed differ.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from remprop.theory.checks import as_float_array, check_count

__all__ = [
    "DTYPES", "STREAM_WEIGHTS", "STREAM_TOKENS", "STREAM_EMBEDDINGS", "STREAM_READOUTS",
    "resolve_device", "resolve_dtype", "check_positive_int", "check_scalar", "check_seed", "generator",
    "torch_threads",
]

#: Floating-point precisions a simulation may run in.
DTYPES = {"float32": torch.float32, "float64": torch.float64}

#: Stream identifier of the layer weights.
STREAM_WEIGHTS = 0
#: Stream identifier of the synthetic tokens.
STREAM_TOKENS = 1
#: Stream identifier of the embedding tables.
STREAM_EMBEDDINGS = 2
#: Random readouts of the gradient measurements (3 is taken by the LayerNorm figure's value bias).
STREAM_READOUTS = 4


def resolve_device(device=None) -> torch.device:
    """The torch device to simulate on.

    Parameters
    ----------
    device : str, torch.device or None
        ``None`` or ``"auto"``: CUDA when available, else the CPU. Otherwise any
        device torch understands (``"cpu"``, ``"cuda"``, ``"cuda:1"``).

    Raises
    ------
    ValueError
        ``device`` is not a device name, or names CUDA on a machine without it.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:n]', got {device!r}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:n]', got {device!r}")
    return resolved


def resolve_dtype(dtype="float32") -> torch.dtype:
    """``"float32"``/``"float64"`` (or the torch dtypes themselves) -> torch dtype."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of 'float32', 'float64', got {dtype!r}")


def check_positive_int(name, value, minimum=1) -> int:
    """An integer >= ``minimum`` (bools rejected), or ValueError naming ``name``
    (:func:`remprop.theory.checks.check_count`)."""
    return check_count(name, value, minimum)


def check_scalar(name, value, **checks) -> float:
    """A real scalar passing ``remprop.theory.checks.as_float_array`` checks (positive=, nonnegative=, ...)."""
    arr = as_float_array(name, value, **checks)
    if arr.ndim != 0:
        raise ValueError(f"{name} must be a scalar to simulate one network, got shape {arr.shape}")
    return float(arr)


def check_seed(seed, name="seed") -> int:
    """A seed: an integer >= 0."""
    return check_count(name, seed, 0)


def generator(seed: int, stream: int, index: int = 0, device=None) -> torch.Generator:
    """A torch generator for one independent random stream.

    The state is ``SeedSequence([seed, stream, index])``: the stream of layer ``index``
    of seed ``seed`` is reproducible on its own and independent of every other
    ``(seed, stream, index)``.

    Parameters
    ----------
    seed : int
        Initialisation seed, >= 0.
    stream : int
        One of :data:`STREAM_WEIGHTS`, :data:`STREAM_TOKENS`, :data:`STREAM_EMBEDDINGS`,
        :data:`STREAM_READOUTS`.
    index : int
        Layer (weights) or any other sub-stream index, >= 0.
    device : torch.device or str, optional
        Device the generator draws on (default CPU).
    """
    seed = check_seed(seed)
    entropy = np.random.SeedSequence([seed, int(stream), int(index)]).generate_state(1, np.uint64)[0]
    gen = torch.Generator(device=torch.device(device) if device is not None else "cpu")
    gen.manual_seed(int(entropy) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


@contextlib.contextmanager
def torch_threads(count: int):
    """Run the block with ``count`` torch CPU threads, then restore the previous number.

    Simulations fix the thread count so that their numbers do not depend on the machine's
    core count (a reduction split over other threads rounds differently). The theory's
    numba kernels run with the same count inside the block: numba's OpenMP layer sets the
    process's OpenMP thread count at every parallel launch, which torch reads, so a theory
    call inside the block would otherwise leave torch on every core (12x slower small
    training steps were measured on two shared cores). The same start-up, on numba's first
    call in a process, did it once more: a fresh dask worker (``OMP_NUM_THREADS=1``) trained its
    cells on two torch threads, 15x slower with two such workers on two cores.
    """
    import numba

    before = torch.get_num_threads()
    numba_before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(count, numba.config.NUMBA_NUM_THREADS)))
    # read again: numba's first call starts its threading layer, whose OpenMP start-up sets the
    # process's OpenMP count to numba's own (all cores), which torch then reads
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        numba.set_num_threads(numba_before)
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
