"""The activations known to the engine: names, integer codes, and their Gaussian moments.

Each activation is an :class:`ActivationSpec`: the scalar function, its jittable moments
``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])`` and ``q1 -> E[phi'(u)^2]``, and the
integer code by which the depth kernels (:mod:`remprop.theory.kernels`) specialise on
it. :func:`register_activation` adds any numba-jittable scalar function (a plain Python
function is compiled with ``numba.njit``); ``Architecture(activation=fn)`` registers
``fn`` on the fly (:func:`resolve_activation`). A user activation's functions are compiled
on their own, in memory, in the process that registered it (``compiled_user_function``), and
passed to the compiled loops (the depth kernels, the moments over arrays), which are compiled once
for every activation and kept on disk.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np
from numba import cfunc, njit, types

from .._jit import CACHE

from .closed_form import (
    erf_derivative_moment_core,
    erf_function,
    erf_moments_core,
    linear_derivative_moment_core,
    linear_function,
    linear_moments_core,
    relu_derivative_moment_core,
    relu_function,
    relu_moments_core,
)
from .quadrature_moments import (
    EVEN,
    GENERAL,
    ODD,
    gelu_derivative_moment_core,
    gelu_function,
    gelu_moments_core,
    make_derivative_moment,
    make_quadrature_moments,
    silu_derivative_moment_core,
    silu_function,
    silu_moments_core,
    tanh_derivative_moment_core,
    tanh_function,
    tanh_moments_core,
)

__all__ = [
    "ACTIVATIONS", "BUILTIN_ACTIVATIONS", "ActivationSpec", "register_activation",
    "resolve_activation", "activation_spec",
]

#: Activations with a Gaussian kernel in the engine, and their integer codes in the
#: kernels. Grows when :func:`register_activation` adds one (codes from 100 up).
ACTIVATIONS = {"relu": 0, "linear": 1, "tanh": 2, "erf": 3, "gelu": 4, "silu": 5}
RELU, LINEAR, TANH, ERF, GELU, SILU = range(6)
#: The activations that ship with remprop (ACTIVATIONS also holds registered ones).
BUILTIN_ACTIVATIONS = tuple(ACTIVATIONS)
FIRST_USER_CODE = 100

_PARITIES = {"odd": ODD, "even": EVEN, None: GENERAL, "none": GENERAL}


@dataclass(frozen=True)
class ActivationSpec:
    """An activation known to the engine.

    Attributes
    ----------
    name : str
    code : int
        Integer code used by the depth kernels (:data:`ACTIVATIONS`).
    function : callable
        The scalar activation (jittable).
    moments : callable
        Jittable ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])`` on scalars.
    derivative_moment : callable
        Jittable ``q1 -> E[phi'(u)^2]``.
    builtin : bool
        Built-in activations are compiled once and cached on disk.
    homogeneous : bool
        ``phi(c x) = c phi(x)`` for ``c > 0`` (ReLU, linear): the moments are homogeneous
        of degree one, which lets the depth kernels carry the scale of a no-LN stream
        (:mod:`remprop.theory.kernels`). False for every other activation.
    """

    name: str
    code: int
    function: Callable
    moments: Callable
    derivative_moment: Callable
    builtin: bool = True
    homogeneous: bool = False


_SPECS = {
    "relu": ActivationSpec("relu", RELU, relu_function, relu_moments_core, relu_derivative_moment_core,
                           homogeneous=True),
    "linear": ActivationSpec("linear", LINEAR, linear_function, linear_moments_core,
                             linear_derivative_moment_core, homogeneous=True),
    "tanh": ActivationSpec("tanh", TANH, tanh_function, tanh_moments_core, tanh_derivative_moment_core),
    "erf": ActivationSpec("erf", ERF, erf_function, erf_moments_core, erf_derivative_moment_core),
    "gelu": ActivationSpec("gelu", GELU, gelu_function, gelu_moments_core, gelu_derivative_moment_core),
    "silu": ActivationSpec("silu", SILU, silu_function, silu_moments_core, silu_derivative_moment_core),
}
_BY_CODE = {spec.code: spec for spec in _SPECS.values()}
#: user function object -> registered name
_BY_FUNCTION: dict = {}


def _compile_scalar(name, fn):
    """A numba dispatcher for ``fn`` that maps float64 -> float64, or ValueError naming ``name``."""
    try:
        dispatcher = fn if isinstance(fn, numba.core.registry.CPUDispatcher) else njit(fn)
        for probe in (0.0, 0.5, -1.5):
            value = dispatcher(probe)
            float(value)
    except Exception as exc:  # numba typing errors come in many classes
        raise ValueError(f"{name} must be a numba-jittable scalar function float -> float; "
                         f"calling it compiled failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                         ) from None
    return dispatcher


def register_activation(name, function, *, derivative=None, parity=None, strip=math.pi / 2,
                        replace=False):
    r"""Make a scalar activation available to every map and kernel.

    After ``register_activation("softsign", f)``, ``Architecture(activation="softsign")``,
    :func:`~remprop.theory.activation_moments` and the edge-of-chaos functions use it; its
    Gaussian moments come from the trapezoid rule of :mod:`remprop.theory.quadrature`
    (:mod:`.quadrature_moments`),

    .. math:: E[\phi(u)\phi(v)] = E_w[g(w) g(\pm w)],\quad g(w) = E_e[\phi(a w + b e)] .

    Parameters
    ----------
    name : str
        New name (built-in names cannot be replaced).
    function : callable
        A numba-jittable scalar function float -> float: a ``numba.njit`` dispatcher or a
        plain Python function (compiled here). It must return finite values without
        raising on ``PROBE_GRID`` (``[-32, 32]``, step 0.1: the quadrature nodes of
        q1 <= 16), checked here; beyond, a failure at a quadrature node makes
        :func:`~remprop.theory.activation_moments` raise a ValueError naming the activation
        and the input range.
    derivative : callable, optional
        phi', jittable, for ``chi_1 = sigma_w2 E[phi'(u)^2]``; by default a central
        difference with step ``1e-5 (1 + |x|)`` (error ~1e-10).
    parity : {None, "odd", "even"}
        Declared symmetry of phi; "odd" or "even" halves the quadrature work.
    strip : float
        Half-width of the strip around the real axis in which phi is analytic (tanh:
        pi/2, the default; SiLU: pi); it sets the node count (:mod:`remprop.theory.quadrature`).
        Use a small value for activations with kinks (the error then falls only like h^2).
    replace : bool
        Allow re-registering ``name`` for a different function.

    Returns
    -------
    str
        ``name``.

    Raises
    ------
    ValueError
        Naming ``name``, ``function``, ``derivative``, ``parity`` or ``strip``.

    References
    ----------
    Poole et al., NeurIPS 2016 (mean-field kernels of arbitrary activations).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _SPECS and (_SPECS[name].builtin or not replace):
        raise ValueError(f"name {name!r} is already registered"
                         + ("" if _SPECS[name].builtin else " (pass replace=True)"))
    if not callable(function):
        raise ValueError(f"function must be callable, got {function!r}")
    if parity not in _PARITIES:
        raise ValueError(f"parity must be None, 'odd' or 'even', got {parity!r}")
    try:
        strip = float(strip)
    except (TypeError, ValueError):
        raise ValueError(f"strip must be a positive number, got {strip!r}") from None
    if not (strip > 0 and math.isfinite(strip)):
        raise ValueError(f"strip must be a positive number, got {strip!r}")
    if derivative is not None and not callable(derivative):
        raise ValueError(f"derivative must be callable or None, got {derivative!r}")
    phi = _compile_scalar("function", function)
    _check_on_probe_grid(name, "function", function, phi)
    code = max(FIRST_USER_CODE - 1, *_BY_CODE) + 1
    if derivative is None:
        dphi = _central_difference(phi)
    else:
        dphi = _compile_scalar("derivative", derivative)
        _check_on_probe_grid(name, "derivative", derivative, dphi)
    spec = ActivationSpec(name, code, phi,
                          make_quadrature_moments(_guarded(phi), _PARITIES[parity], 0.0, strip),
                          make_derivative_moment(_guarded(dphi), strip), builtin=False)
    previous = _SPECS.get(name)
    _SPECS[name] = spec
    _BY_CODE[spec.code] = spec
    ACTIVATIONS[name] = spec.code
    if previous is not None:
        _BY_FUNCTION.pop(previous.function, None)
    _BY_FUNCTION[function] = name
    _BY_FUNCTION[phi] = name
    return name


#: Inputs a registered function is checked on: 0.1 apart on [-32, 32], the trapezoid nodes
#: ``|x| <= HALF_WIDTH sqrt(q1)`` of the documented accuracy domain q1 <= 16 (docs/theory.md
#: section 4; :mod:`remprop.theory.quadrature`).
PROBE_GRID = np.linspace(-32.0, 32.0, 641)


def _check_on_probe_grid(name, role, function, compiled):
    """ValueError naming the activation and ``function`` unless it is finite on ``PROBE_GRID``."""
    label = getattr(function, "__name__", repr(function))
    for x in PROBE_GRID:
        try:
            value = float(compiled(float(x)))
        except Exception as exc:  # noqa: BLE001 - any failure of user code is reported
            raise ValueError(f"{role} {label!r} of activation {name!r} must be defined on "
                             f"[{PROBE_GRID[0]:g}, {PROBE_GRID[-1]:g}]: at x = {x:g} it raised "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        if not math.isfinite(value):
            raise ValueError(f"{role} {label!r} of activation {name!r} must be finite on "
                             f"[{PROBE_GRID[0]:g}, {PROBE_GRID[-1]:g}]: at x = {x:g} it returned {value!r}")


def _guarded(function):
    """``function`` for the quadrature: NaN where it raises (numba cannot raise from the
    parallel kernels), so that :func:`~remprop.theory.activation_moments` and the maps
    report the failure with the activation's name and input range instead of a wrong number."""

    def guarded(x):
        try:
            return function(x)
        except Exception:  # noqa: BLE001 - turned into NaN, reported by the callers
            return math.nan

    return njit(guarded)


def _central_difference(phi):
    """A central difference of ``phi``, compiled in memory (a user activation's: never kept on disk)."""

    def derivative(x):
        step = 1e-5 * (1.0 + abs(x))
        return (phi(x + step) - phi(x - step)) / (2.0 * step)
    return njit(derivative)


#: The numba types of a user activation's functions as compiled code takes them (first-class functions,
#: ``compiled_user_function``): its moments ``(q1, p1) -> (m2, m11)``, its derivative moment and the
#: activation itself ``x -> y``.
USER_FUNCTION_TYPES = {"moments": types.UniTuple(types.float64, 2)(types.float64, types.float64),
                       "derivative_moment": types.float64(types.float64), "function": types.float64(types.float64)}


def _nan_pair(q1, p1):
    return math.nan, math.nan


def _nan(x):
    return math.nan


@functools.lru_cache(maxsize=None)
def compiled_user_function(code, kind):
    """The ``kind`` (a key of :data:`USER_FUNCTION_TYPES`) of the user-registered activation of ``code``
    compiled on its own (a ``numba.cfunc``), for the compiled loops that take it as an argument: the depth
    kernels' sweeps, the moments over arrays, the pair sums. Those are compiled once for every activation
    and kept on disk; only this is compiled, in memory, in the process that registered the activation.
    For a built-in ``code`` (which those loops evaluate themselves) or a negative one (none) a NaN
    stand-in, kept on disk."""
    signature = USER_FUNCTION_TYPES[kind]
    if code < 0 or activation_spec(code).builtin:
        return cfunc(signature, cache=CACHE)(_nan_pair if kind == "moments" else _nan)
    return cfunc(signature)(getattr(activation_spec(code), kind))


def resolve_activation(activation, name="activation"):
    """The registered name for a name or a callable (registering new callables).

    Raises ``ValueError`` naming ``name`` for unknown names and unjittable callables.
    """
    if isinstance(activation, str):
        if activation not in _SPECS:
            options = ", ".join(repr(n) for n in _SPECS)
            raise ValueError(f"{name} must be one of {options} or a numba-jittable function, "
                             f"got {activation!r}")
        return activation
    if callable(activation):
        try:
            known = _BY_FUNCTION.get(activation)
        except TypeError:  # unhashable callable
            known = None
        if known is not None:
            return known
        base = getattr(activation, "__name__", "activation")
        label = f"user:{base}"
        suffix = 2
        while label in _SPECS:
            label = f"user:{base}#{suffix}"
            suffix += 1
        try:
            return register_activation(label, activation)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    raise ValueError(f"{name} must be an activation name or a numba-jittable function, got {activation!r}")


def activation_spec(activation):
    """The :class:`ActivationSpec` of a name, code or registered callable."""
    if isinstance(activation, (int, np.integer)) and not isinstance(activation, bool):
        if int(activation) not in _BY_CODE:
            raise ValueError(f"activation code {activation!r} is not registered")
        return _BY_CODE[int(activation)]
    return _SPECS[resolve_activation(activation)]
