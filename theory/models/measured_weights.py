r"""A model's own weights in the theory's parameters: measured scales -> (beta, variances, q0, rho0).

A Hugging Face configuration read at the library's default initialisation
(:func:`~remprop.theory.model_spec`, docs/real_models.md section 1) assumes every weight is
``N(0, r^2)``. A model initialised otherwise -- muP's ``1/fan_in`` attention, DeepNorm's
down-scaled residual branches, a user's own std -- is diagnosed as it is by measuring the
second moment of every matrix, norm gain and embedding table (the torch side:
:mod:`remprop.validation.own_weights`) and mapping those numbers onto the engine's parameters
with the rules below, the same rules that turn the default ``r^2`` into them
(:func:`weight_parameters` and :func:`input_state` are the one home of both routes).

With ``v_X`` the mean square of the entries of matrix X (averaged over the layers), ``n_X``
its fan-in, ``g_A^2`` and ``g_M^2`` the mean squared gains of the norms whose outputs the
attention and the MLP read, and ``T`` the sequence length:

==========================  ======================================================
query/key scale             ``beta = sqrt(v_Q n_Q v_K n_K) g_A^2 / sqrt(log T)``
values                      ``sigma_v2 = v_V n_V g_A^2``
output projection           ``sigma_o2 = v_O n_O`` (post-LN: ``/ g_A^2``)
MLP                         ``sigma_w2 = v_1 n_1 g_M^2``, ``sigma_w2_out = v_2 n_2``
                            (post-LN: ``/ g_M^2``); ``sigma_b2`` = the first layer's
                            bias mean square
input state                 ``q0 = sum_i q_i``, ``rho0 = sum_i p_i / q0`` over the summed
                            embedding tables (``q_i`` the mean square of the rows the
                            tokens read, ``p_i`` the mean overlap of two tokens' rows);
                            a norm after the sum: ``q0 = g_E^2`` (post-LN: ``g_E^2 / g_A^2``)
==========================  ======================================================

Why the gains fold in this way: a norm's gain ``gamma`` multiplies its output coordinate by
coordinate, so the next linear layer sees the variance ``v n mean(gamma^2)`` (pre-LN: the
branch reads the gained norm). In a post-LN block the gained norm's output is also the
skip: ``N(g x + F(g x)) = N(x + F(g x) / g)``, i.e. the theory's unit stream with the
branch's first layer scaled by ``g^2`` and its output divided by ``g^2`` (values are
linear, so for attention ``g`` cancels in ``sigma_v2 sigma_o2`` and only beta carries
``g^2``). A branch scaled down (DeepNorm's ``W_V``, ``W_O`` and MLP weights times
``(8L)^(-1/4)``) is a smaller ``sigma_v2``, ``sigma_o2``, ``sigma_w2``, ``sigma_w2_out``;
the diagnosis's ``alpha*`` is then computed with them (``x + c F(x)`` is ``c`` times the
engine's ``x / c + F(x)``, docs/theory.md section 5).

The engine has one value of each parameter for all layers: layers measured unequal (a
depth-dependent init) are averaged and the spread is reported. A sample second moment of
``n`` i.i.d. Gaussian entries has relative standard deviation ``sqrt(2 / n)``
(:func:`second_moment_error`): measured scales are compared with it.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333 (the maps); docs/theory.md
sections 2 (the parameters) and 5 (skips and norms); Yang et al. 2022 (muP, ``1/d``
attention); Wang et al. 2022 (DeepNet/DeepNorm).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checks import as_float_array, scalar_or_array
from .block_weights import MODULE_FAMILY, family_parameters

__all__ = ["MatrixScale", "EmbeddingTable", "MeasuredWeights", "NormGains", "weight_parameters", "input_state",
           "second_moment_error", "measured_spec", "holds_weights", "weight_files", "unread_weight_files",
           "TORCH_WEIGHT_FILES", "WEIGHT_ROLES", "GAIN_ROLES", "ZERO_BETA"]

#: Matrix roles a measurement fills, in the theory's terms (each one ``v_X`` with its fan-in).
WEIGHT_ROLES = ("query", "key", "value", "output", "mlp_in", "mlp_out")
#: Norm-gain roles: the norm whose output the attention reads, the one the MLP reads, the
#: norm after the embeddings (BERT-like models); then the QK-norm gains of queries and keys, and the
#: gains on each branch's output (a norm after the branch, a LayerScale: :mod:`.block_weights`).
GAIN_ROLES = ("attention_norm", "mlp_norm", "embedding_norm", "query_norm", "key_norm", "attention_branch",
              "mlp_branch", "attention_scale", "mlp_scale")
#: Standard deviations beyond which a measured number differs from another (or from 0).
SIGNIFICANCE = 5.0
#: The beta a measured ``beta = 0`` (a zero query or key matrix: uniform attention) is run at. The
#: maps depend on beta through ``beta^2 q^2 log T``, whose relative effect at this beta (1e-300 in beta^2) is far
#: below double precision: the engine's values here are its ``beta -> 0`` limit to the last bit
#: (the tests hold them equal at 1e-12 and 1e-100, and the participation ratio at ``1/T``).
ZERO_BETA = 1e-150


def second_moment_error(entries, kurtosis=3.0):
    r"""Relative standard deviation of the sample second moment of ``n`` i.i.d. zero-mean entries.

    .. math:: \frac{\operatorname{sd}(\hat m_2)}{m_2} = \sqrt{\frac{\kappa - 1}{n}},\qquad
              \hat m_2 = \frac1n \sum_i w_i^2,\ \kappa = \frac{E w^4}{(E w^2)^2}

    (``Var(w^2) = E w^4 - (E w^2)^2``). Gaussian entries have ``kappa = 3``: ``sqrt(2 / n)``
    (``n \hat m_2 / s^2`` is chi-squared with ``n`` degrees of freedom); uniform ones
    (PyTorch's ``kaiming_uniform_``, ``xavier_uniform_``) ``kappa = 9/5``: ``sqrt(4 / (5 n))``.
    A measured scale within a few of these of a scheme's value is that scheme's draw.

    Parameters
    ----------
    entries : array_like
        Number of entries n, >= 1.
    kurtosis : float
        ``E w^4 / (E w^2)^2`` of the entries' distribution (>= 1; default 3, Gaussian).

    Returns
    -------
    float or ndarray

    Examples
    --------
    >>> round(float(second_moment_error(64 * 64)), 4)
    0.0221
    >>> round(float(second_moment_error(64 * 64, kurtosis=9 / 5)), 4)
    0.014
    """
    n = as_float_array("entries", entries, positive=True)
    kurtosis = float(as_float_array("kurtosis", kurtosis, low=1.0))  # E w^4 >= (E w^2)^2
    return scalar_or_array(np.sqrt((kurtosis - 1.0) / n))


@dataclass(frozen=True)
class NormGains:
    """The norms in front of a block's weights, as :func:`weight_parameters` folds them.

    Attributes
    ----------
    attention2, mlp2 : array_like
        Mean squared gains of the norms the attention and the MLP read, > 0 (1: no gain).
    post_norm : bool
        Post-LN block (the gained norm's output is also the skip).
    """

    attention2: object = 1.0
    mlp2: object = 1.0
    post_norm: bool = False


def weight_parameters(query, key, value, output, mlp_in, mlp_out, mlp_bias=0.0, *, seq_len, gains=NormGains()):
    r"""The engine's attention and MLP parameters of weights of given scales.

    Each of ``query`` ... ``mlp_out`` is a weight's variance times its fan-in, ``v n``
    (the library default: ``r^2 d``, ``r^2 d_ff`` for the MLP's second layer).

    .. math::
        \beta = \frac{\sqrt{v_Q n_Q\, v_K n_K}\, g_A^2}{\sqrt{\log T}},\quad
        \sigma_v^2 = v_V n_V g_A^2,\quad \sigma_o^2 = v_O n_O / g_A^{2\,[\mathrm{post}]},\quad
        \sigma_w^2 = v_1 n_1 g_M^2,\quad \sigma_{w,\mathrm{out}}^2 = v_2 n_2 / g_M^{2\,[\mathrm{post}]}

    A score of one head is a sum of ``d_H`` products of query and key components of
    variances ``v_Q n_Q g_A^2 q`` and ``v_K n_K g_A^2 q`` over ``sqrt(d_H)``, so
    ``Var(s) = v_Q n_Q v_K n_K g_A^4 q^2``, the engine's ``beta^2 q^2 log T``
    (``qk_scaling="model"``, docs/theory.md section 2). The gains fold as the module
    docstring explains (post-LN: the skip carries the gain too).

    Parameters
    ----------
    query, key, value, output, mlp_in, mlp_out : array_like
        Variance times fan-in of ``W_Q``, ``W_K``, ``W_V``, ``W_O``, the MLP's first layer
        (gate and up of a gated MLP) and its second layer, each >= 0 (a zero-initialised
        query or key gives ``beta = 0``, a zero value, output or MLP layer a branch that adds
        nothing).
    mlp_bias : array_like
        Mean square of the MLP's first-layer bias (``sigma_b2``), >= 0.
    seq_len : int
        Sequence length T >= 2.
    gains : remprop.theory.models.NormGains
        The mean squared gains of the norms the attention and the MLP read and whether the block is
        post-LN (default: no gains, pre-LN).

    Returns
    -------
    dict
        ``beta``, ``sigma_v2``, ``sigma_o2``, ``sigma_w2``, ``sigma_w2_out``, ``sigma_b2``
        (floats, or arrays broadcast over the inputs).

    Examples
    --------
    The library default ``r = 0.02`` at ``d = 64``, ``d_ff = 256``, ``T = 128``:

    >>> p = weight_parameters(*[0.02**2 * 64] * 5, 0.02**2 * 256, seq_len=128)
    >>> round(p["beta"], 5), round(p["sigma_w2_out"], 4)
    (0.01162, 0.1024)
    """
    from ..rem import check_seq_len

    seq_len = check_seq_len(seq_len, allow_none=False)
    if not isinstance(gains, NormGains):
        raise ValueError(f"gains must be a NormGains, got {type(gains).__name__}")
    names = ("query", "key", "value", "output", "mlp_in", "mlp_out", "gains.attention2", "gains.mlp2")
    vq, vk, vv, vo, v1, v2, ga, gm = (as_float_array(name, value, positive=name.startswith("gains."),
                                                     nonnegative=not name.startswith("gains."))
                                      for name, value in zip(names, (query, key, value, output, mlp_in, mlp_out,
                                                                     gains.attention2, gains.mlp2)))
    bias = as_float_array("mlp_bias", mlp_bias, nonnegative=True)
    post = bool(gains.post_norm)
    out = {"beta": np.sqrt(vq) * np.sqrt(vk) * ga / math.sqrt(math.log(seq_len)),  # no underflow of vq vk
           "sigma_v2": vv * ga, "sigma_o2": vo / ga if post else vo,
           "sigma_w2": v1 * gm, "sigma_w2_out": v2 / gm if post else v2, "sigma_b2": bias}
    return {name: scalar_or_array(value) for name, value in out.items()}


def input_state(q_tables, p_tables, *, norm_gain2=None, stream_gain2=1.0):
    r"""Input state ``(q0, rho0)`` of the sum of embedding tables.

    .. math:: q_0 = \sum_i q_i, \qquad \rho_0 = \frac{\sum_i p_i}{\sum_i q_i}

    Tables are independent of each other, so the cross terms vanish. ``q_i`` is the mean
    square of the rows the tokens read and ``p_i`` the mean overlap (per coordinate) of two
    different tokens' rows: for uniformly drawn ids from ``V`` rows of a ``N(0, r^2)`` table
    ``q = r^2``, ``p = r^2 / V`` (two tokens share a word with probability ``1/V``); distinct
    positions ``p = 0``; a row every token shares (BERT's token type) ``p = q``. A norm after
    the sum keeps ``rho0`` and sets ``q0 = g_E^2`` (divided by ``stream_gain2`` where the
    gains are folded into the branches of a post-LN stack, :func:`weight_parameters`).

    Parameters
    ----------
    q_tables, p_tables : sequence of float
        Per table, its mean square ``q_i > 0`` and mean overlap ``p_i`` (``|p_i| <= q_i``).
    norm_gain2 : float, optional
        Mean squared gain of a norm after the sum (None: no norm).
    stream_gain2 : float
        Post-LN stacks: the gain folded into the branches (1 otherwise).

    Returns
    -------
    (float, float)

    Examples
    --------
    BERT at ``r = 0.02`` (word, position, shared token type; ``V = 30522``) and its LayerNorm:

    >>> r2, V = 0.02**2, 30522
    >>> q0, rho0 = input_state([r2, r2, r2], [r2 / V, 0.0, r2], norm_gain2=1.0)
    >>> q0, round(rho0, 4)
    (1.0, 0.3333)
    """
    q = np.asarray(q_tables, dtype=np.float64)
    p = np.asarray(p_tables, dtype=np.float64)
    if q.ndim != 1 or q.shape != p.shape or not q.size:
        raise ValueError(f"q_tables and p_tables must be two sequences of one length >= 1, got shapes "
                         f"{q.shape} and {p.shape}")
    if not (np.all(np.isfinite(q)) and np.all(q > 0)):
        raise ValueError(f"q_tables must be finite and > 0, got {q.tolist()}")
    if not (np.all(np.isfinite(p)) and np.all(np.abs(p) <= q * (1 + 1e-9))):
        raise ValueError(f"p_tables must be finite with |p_i| <= q_i, got {p.tolist()}")
    total = float(q.sum())
    rho0 = float(p.sum()) / total
    if norm_gain2 is None:
        return total, rho0
    gain = float(as_float_array("norm_gain2", norm_gain2, positive=True))
    return gain / float(as_float_array("stream_gain2", stream_gain2, positive=True)), rho0


@dataclass(frozen=True)
class MatrixScale:
    """The measured scale of one kind of tensor, over the layers that hold it.

    Attributes
    ----------
    mean_square : float
        Mean of the squared entries over all layers (``v_X``; for a gain, ``mean(gamma^2)``).
    mean : float
        Mean of the entries.
    fan_in : int
        Inputs of one output (1 for gains and biases).
    entries : int
        Entries measured, over all layers (sampling error :func:`second_moment_error`).
    layers : tuple of float
        The mean square of each layer.
    """

    mean_square: float
    mean: float
    fan_in: int
    entries: int
    layers: tuple = ()

    @property
    def scale(self) -> float:
        """Variance times fan-in, ``v n``."""
        return self.mean_square * self.fan_in

    @property
    def std(self) -> float:
        """Root mean square of the entries."""
        return math.sqrt(self.mean_square)

    def layer_spread(self) -> float | None:
        """``max / min`` of the per-layer mean squares where it exceeds the sampling error of one
        layer by ``SIGNIFICANCE = 5`` standard deviations, else None (layers alike)."""
        layers = np.asarray(self.layers, dtype=np.float64)
        if layers.size < 2 or not np.all(layers > 0):
            return None
        error = SIGNIFICANCE * float(second_moment_error(max(self.entries // layers.size, 1)))
        ratio = float(layers.max() / layers.min())
        return ratio if ratio > (1 + error) / (1 - min(error, 0.5)) else None

    def to_dict(self) -> dict:
        return {"mean_square": self.mean_square, "std": self.std, "mean": self.mean, "fan_in": self.fan_in,
                "entries": self.entries, "layers": list(self.layers)}


@dataclass(frozen=True)
class EmbeddingTable:
    """One embedding table as the tokens read it (:func:`input_state`).

    Attributes
    ----------
    name : str
        ``"word"``, ``"position"`` or ``"token type"``.
    q : float
        Mean square of the rows read.
    p : float
        Mean overlap (per coordinate) of two different tokens' rows.
    """

    name: str
    q: float
    p: float

    def to_dict(self) -> dict:
        return {"name": self.name, "q": self.q, "p": self.p}


@dataclass(frozen=True)
class MeasuredWeights:
    """Scales measured on a model's own weights (:mod:`remprop.validation.own_weights` fills it).

    Attributes
    ----------
    source : str
        Where the weights come from (a model class, a folder).
    matrices : dict
        :data:`WEIGHT_ROLES` -> :class:`MatrixScale` (every role needed).
    gains : dict
        :data:`GAIN_ROLES` -> :class:`MatrixScale` (a missing role: gain 1 / no such norm).
    embeddings : tuple of EmbeddingTable
    mlp_bias : MatrixScale or None
        The MLP's first-layer bias (``sigma_b2``); None: no bias.
    other_biases : dict
        Biases the engine takes as zero (query, key, value, output, MLP output) -> :class:`MatrixScale`.
    """

    source: str
    matrices: dict
    gains: dict = field(default_factory=dict)
    embeddings: tuple = ()
    mlp_bias: MatrixScale | None = None
    other_biases: dict = field(default_factory=dict)

    def __post_init__(self):
        missing = [role for role in WEIGHT_ROLES if role not in self.matrices]
        if missing:
            raise ValueError(f"weights: no {', '.join(missing)} matrices found in {self.source}")
        if not self.embeddings:
            raise ValueError(f"weights: no embedding table found in {self.source}")
        for table in self.embeddings:
            if not (math.isfinite(table.q) and table.q > 0 and math.isfinite(table.p)):
                raise ValueError(f"weights: the {table.name} embedding table of {self.source} has mean square "
                                 f"{table.q!r} and mean overlap {table.p!r} (need finite, the mean square > 0)")
        for role, scale in list(self.matrices.items()) + list(self.gains.items()):
            # a zero matrix is a legitimate init (muP's zero query, a zero-initialised residual branch);
            # a zero gain would divide the folded post-LN branches by zero
            zero_ok = role in self.matrices
            if not (math.isfinite(scale.mean_square) and (scale.mean_square > 0 or
                                                          (zero_ok and scale.mean_square == 0))):
                raise ValueError(f"weights: the {role.replace('_', ' ')} weights of {self.source} have mean square "
                                 f"{scale.mean_square!r} (need finite and {'>= 0' if zero_ok else '> 0'})")

    def gain2(self, role) -> float:
        """Mean squared gain of a norm role (1 where the model has none)."""
        scale = self.gains.get(role)
        return 1.0 if scale is None else scale.mean_square

    def to_dict(self) -> dict:
        return {"source": self.source, "matrices": {k: v.to_dict() for k, v in self.matrices.items()},
                "gains": {k: v.to_dict() for k, v in self.gains.items()},
                "embeddings": [t.to_dict() for t in self.embeddings],
                "mlp_bias": None if self.mlp_bias is None else self.mlp_bias.to_dict(),
                "other_biases": {k: v.to_dict() for k, v in self.other_biases.items()}}


def measured_spec(spec, weights: MeasuredWeights):
    """``spec`` (a configuration's :class:`~remprop.theory.ModelSpec`) with its parameters measured.

    The block structure, sizes, sequence length and activation stay the configuration's; the
    query/key scale, the variances, ``sigma_b2`` and the input state come from ``weights``
    through :func:`weight_parameters` and :func:`input_state`. The assumptions gain one note
    per departure the measurement shows (layers of unequal scale, weights of nonzero mean,
    biases the engine takes as zero, norm shifts); those that quoted the default init are
    replaced.

    Parameters
    ----------
    spec : ModelSpec
    weights : MeasuredWeights

    Returns
    -------
    ModelSpec
        With ``weights`` set (the report's initialisation line and ``to_dict()["weights"]``).
    """
    if spec.family not in MEASURED_FAMILIES:
        raise ValueError(f"weights: measured weights are read for model_type {', '.join(MEASURED_FAMILIES)}; "
                         f"got {spec.family!r}")
    arch = spec.architecture
    post = arch.norm.normalises_stream
    m = weights.matrices
    ga, gm = weights.gain2("attention_norm"), weights.gain2("mlp_norm")
    params = weight_parameters(m["query"].scale, m["key"].scale, m["value"].scale, m["output"].scale,
                               m["mlp_in"].scale, m["mlp_out"].scale,
                               0.0 if weights.mlp_bias is None else weights.mlp_bias.mean_square,
                               seq_len=spec.seq_len, gains=NormGains(ga, gm, post))
    tables = weights.embeddings
    norm_gain2 = weights.gain2("embedding_norm") if spec.embedding_layer_norm else None
    q0, rho0 = input_state([t.q for t in tables], [t.p for t in tables], norm_gain2=norm_gain2,
                           stream_gain2=ga if post else 1.0)
    beta = params.pop("beta")
    params, beta, q0, rho0, family_notes = family_parameters(spec, weights, params, beta, q0, rho0)
    if beta == 0:  # a zero query or key: uniform attention, run as the maps' beta -> 0 limit
        beta = ZERO_BETA
    source = f"the measured weights of {weights.source}"
    try:
        settings = spec.settings.replace(arch=arch.replace(**params), beta=beta, q0=q0, rho0=rho0)
    except ValueError as err:
        raise ValueError(f"{source} give an unusable model: {err}") from None
    notes = _notes(spec, weights, q0, rho0) + family_notes + (
        f"the attention output projection W_O is modelled: it scales the attention branch by sigma_o2 = "
        f"{params['sigma_o2']:.4g}",)
    kept = tuple(note for note in spec.assumptions if not note.startswith(_DEFAULT_INIT_NOTES))
    return dataclasses.replace(spec, settings=settings, weights=weights, assumptions=notes + kept)


#: The families whose weights :mod:`remprop.validation.own_weights` reads (their block is the
#: configuration reader's standard one, :func:`~remprop.theory.model_spec`).
MEASURED_FAMILIES = ("bert", "roberta", "gpt2", "llama", "mistral", "qwen2", "phi3", "gemma2", "olmo2", "vit",
                     MODULE_FAMILY)

#: Starts of configuration notes that quote the library's default init (replaced when measured).
_DEFAULT_INIT_NOTES = ("the attention output projection W_O is modelled", "LayerNorm eps", "RMSNorm eps",
                       "d_ff = ", "input: all tokens share")


def _notes(spec, weights, q0, rho0) -> tuple:
    """The departures a measurement shows, each with its size."""
    notes = [f"input: q0 = {q0:.4g}, rho0 = {rho0:.4f} from the {', '.join(t.name for t in weights.embeddings)} "
             "embedding table(s) as uniformly drawn ids read them (repeated words in real text raise rho0)"]
    labels = {"query": "W_Q", "key": "W_K", "value": "W_V", "output": "W_O", "mlp_in": "MLP first layer",
              "mlp_out": "MLP second layer", "attention_norm": "attention-input norm gain",
              "mlp_norm": "MLP-input norm gain", "embedding_norm": "embedding norm gain",
              "query_norm": "query-norm gain", "key_norm": "key-norm gain",
              "attention_branch": "attention branch-norm gain", "mlp_branch": "MLP branch-norm gain",
              "attention_scale": "attention LayerScale", "mlp_scale": "MLP LayerScale"}
    for role, scale in list(weights.matrices.items()) + list(weights.gains.items()):
        spread = scale.layer_spread()
        if spread is not None:
            notes.append(f"{labels[role]}: layers differ in mean square by a factor {spread:.3g} "
                         f"({min(scale.layers):.3g} to {max(scale.layers):.3g}); the engine takes one value for "
                         f"all layers, their mean {scale.mean_square:.3g}")
    notes += _zero_notes(weights, labels)
    for role, scale in weights.matrices.items():
        if abs(scale.mean) > SIGNIFICANCE * math.sqrt(scale.mean_square / scale.entries):
            notes.append(f"{labels[role]}: entries have mean {scale.mean:.3g} (rms {scale.std:.3g}); the engine "
                         "takes zero-mean weights (a mean adds a rank-one part it does not model)")
    for role, scale in weights.other_biases.items():
        if scale.mean_square > 0:
            notes.append(f"{role.replace('_', ' ')} bias of rms {scale.std:.3g}: the engine takes it as zero")
    eps = spec.layer_norm_eps
    if spec.architecture.norm.normalises_branch_inputs and eps > 0:
        notes.append(f"norm eps = {eps:g} against the measured embeddings' q0 = {q0:.3g}: the first norm outputs "
                     f"q = {q0 / (q0 + eps):.4f}, not 1 (the engine's norm has no eps)")
    d_ff = spec.d_ff
    if d_ff != spec.width:
        notes.append(f"d_ff = {d_ff} != d = {spec.width}: the MLP's second layer has fan-in d_ff")
    return tuple(notes)


def _zero_notes(weights, labels) -> list:
    """What a zero-initialised matrix means at init (muP's zero query, a zero residual branch)."""
    m, notes = weights.matrices, []
    zero_qk = [labels[r] for r in ("query", "key") if m[r].mean_square == 0]
    if zero_qk:
        notes.append(f"{' and '.join(zero_qk)} zero (muP's zero-initialised query): beta = 0, uniform attention "
                     f"(every row 1/T), which averages the tokens and leaves only the skip against rank collapse; "
                     f"run as the maps' beta -> 0 limit (at beta = {ZERO_BETA:g}, equal to it in double precision). "
                     "The gradient lines take W_Q and W_K of one scale: "
                     + ("both gradients are 0 with both zero" if len(zero_qk) == 2 else
                        f"with {zero_qk[0]} = 0 the gradient of the other is 0 and its own is not"))
    for branch, roles in (("attention", ("value", "output")), ("MLP", ("mlp_in", "mlp_out"))):
        zero = [labels[r] for r in roles if m[r].mean_square == 0]
        if zero:
            notes.append(f"{' and '.join(zero)} zero (a zero-initialised residual branch, ReZero-like): the {branch} "
                         "branch adds nothing at init and the stream carries what enters it (effective skip "
                         "strength infinite); the branch's gradients reach its zero layer only")
    return notes


#: PyTorch weight files read where a folder holds no ``*.safetensors`` (``save_pretrained``'s
#: ``pytorch_model.bin`` and its shards, a saved ``state_dict``); the torch side loads them with
#: ``torch.load(weights_only=True)``, which builds tensors and plain containers and runs no code.
TORCH_WEIGHT_FILES = ("pytorch_model*.bin", "model*.pt", "model*.pth")


def weight_files(path) -> list:
    """The weight files of a folder, sorted: its ``*.safetensors`` or, without them, its
    :data:`TORCH_WEIGHT_FILES` (an empty list: no weights, or no such folder). Named pipes and other
    special files are listed too, for the reader to refuse by name
    (:func:`~remprop.theory.checks.check_regular_file`) rather than skip."""
    try:
        folder = Path(path)
        if not folder.is_dir():
            return []
        found = sorted(folder.glob("*.safetensors"))
        if not found:
            found = sorted({f for pattern in TORCH_WEIGHT_FILES for f in folder.glob(pattern) if not f.is_dir()})
        return found
    except (TypeError, OSError):
        return []


#: Suffixes of weight files remprop does not read (TensorFlow, Flax, GGUF, other PyTorch names).
FOREIGN_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")


def unread_weight_files(path) -> list:
    """Files of a folder without readable weights (:func:`weight_files` empty) that look like weights
    remprop does not read (``FOREIGN_WEIGHT_SUFFIXES``), sorted: checking such a folder's
    config.json at the library's default init would silently ignore them."""
    if weight_files(path):
        return []
    try:
        folder = Path(path)
        if not folder.is_dir():
            return []
        return sorted(f for f in folder.iterdir() if f.suffix in FOREIGN_WEIGHT_SUFFIXES and f.is_file())
    except (TypeError, OSError):
        return []


def holds_weights(path) -> bool:
    """Whether ``path`` is a folder holding weight files (:func:`weight_files`: ``remprop check DIR``)."""
    return bool(weight_files(path))
