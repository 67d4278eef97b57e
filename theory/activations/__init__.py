r"""Gaussian kernels of activation functions and the two-layer MLP map.

For an activation phi and a centred Gaussian pair (u, v) with Var u = Var v = q1 and
Cov(u, v) = p1 the MLP map needs ``E[phi(u)^2]`` (the norm map: it does not factor
through q1 unless phi is positively homogeneous) and ``E[phi(u) phi(v)]``
(docs/theory.md section 4).

Built-in activations
--------------------
========  =====================================  ===========================================
name      phi(x)                                 kernel
========  =====================================  ===========================================
relu      max(0, x)                              arc-cosine closed form (Cho & Saul 2009)
linear    x                                      (q1, p1)
tanh      tanh(x)                                quadrature, poles at +-i pi/2
erf       erf(x)                                 arcsine closed form (Williams 1997)
gelu      x Phi(x) = x (1 + erf(x/sqrt 2)) / 2   quadrature (Hendrycks & Gimpel 2016)
silu      x / (1 + e^-x)                         quadrature, poles at +-i pi
========  =====================================  ===========================================

Modules
-------
* :mod:`.registry` -- names, kernel codes, :func:`register_activation`,
  :func:`resolve_activation`, :func:`activation_spec`;
* :mod:`.closed_form` -- relu, linear and erf moments in closed form;
* :mod:`.quadrature_moments` -- the trapezoid-rule moments of tanh, GELU, SiLU and user
  functions (accuracy 1e-10 absolute for q1 <= 16);
* :mod:`.maps` -- the dense and MLP maps, :func:`activation_moments`,
  :func:`derivative_moment` and the compiled array loops.

References
----------
Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009.
C. K. I. Williams, "Computing with infinite networks", NeurIPS 1997 (erf kernel).
B. Poole et al., "Exponential expressivity in deep neural networks through transient
chaos", NeurIPS 2016; S. Schoenholz et al., "Deep information propagation", ICLR 2017.
"""
from .closed_form import linear_moments_core, relu_moments_core
from .maps import (
    activation_moments,
    dense_core,
    dense_map,
    derivative_moment,
    mlp_map,
    moments_array,
    relu_kernel,
)
from .registry import (
    ACTIVATIONS,
    BUILTIN_ACTIVATIONS,
    ActivationSpec,
    activation_spec,
    register_activation,
    resolve_activation,
)

__all__ = [
    "ACTIVATIONS", "BUILTIN_ACTIVATIONS", "ActivationSpec", "register_activation", "resolve_activation",
    "activation_spec", "relu_kernel", "activation_moments", "derivative_moment", "dense_map", "mlp_map",
    "dense_core", "moments_array", "relu_moments_core", "linear_moments_core",
]
