"""A model's own weights, diagnosed as they are: ``remprop.check(model)`` and ``remprop check DIR``.

:func:`check` takes a ``transformers`` model (any initialisation: the library's, muP's,
DeepNorm's, a user's own, or trained weights) or a folder holding its ``config.json`` and
``*.safetensors`` files (or, without them, ``pytorch_model.bin`` / ``model.pt``, loaded with
``torch.load(weights_only=True)``), checks every tensor against the configuration's sizes,
measures the second moment of every query, key, value, output and
MLP matrix, of every norm gain and of the embedding tables the tokens read
(:func:`measure_weights`), maps them onto the theory's parameters
(:func:`remprop.theory.models.measured_weights.measured_spec`: beta of the query/key product,
the value/output and MLP variances, ``sigma_b2``, the input state) and returns the same
:class:`~remprop.diagrams.Diagnosis` that ``remprop check NAME`` prints for a configuration
at its default initialisation.

The configuration still gives the block structure, the sizes, the activation and the
sequence length; only the scales come from the weights. Read families: BERT, RoBERTa,
GPT-2, the LLaMA-style decoders (LLaMA, Mistral, Qwen2), Phi-3, Gemma 2, OLMo 2 and ViT
(their role patterns: :mod:`remprop.validation.weight_roles`), with any prefix (``bert.``,
``transformer.``, ``model.``: the ``...ForMaskedLM`` / ``...ForCausalLM`` wrappers too); plain
PyTorch (``nn.TransformerEncoder``, a user's own block) through
:mod:`remprop.validation.module_weights`.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/real_models.md section 6.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

from remprop.theory import model_spec
from remprop.theory.checks import ParameterError, check_regular_file
from remprop.theory.models.hf_config import load_hf_config
from remprop.theory.work_limits import MAX_BYTES, MAX_SECONDS, check_limit, check_work
from remprop.theory.models.measured_weights import (MEASURED_FAMILIES, TORCH_WEIGHT_FILES, EmbeddingTable,
                                                    MatrixScale, MeasuredWeights, holds_weights, measured_spec,
                                                    weight_files)

from .weight_roles import (BRANCH_ROLES, FUSED_ROLES, GAIN_ROLES, LAYOUTS, MATRIX_ROLES, ROLE_PATTERNS, TABLE_ROLES,
                           fused_rows, split_fused)

__all__ = ["check", "own_weights_spec", "measure_weights", "named_tensors"]

#: The role patterns of each family, and the matrix and gain roles (one home: :mod:`.weight_roles`).
_MATRIX_ROLES, _GAIN_ROLES = MATRIX_ROLES, GAIN_ROLES + BRANCH_ROLES
#: Roles whose tensor is a norm's weight (Gemma stores ``gain - 1``: :attr:`WeightLayout.gain_offset`).
_NORM_ROLES = GAIN_ROLES + ("query_norm", "key_norm", "attention_branch", "mlp_branch")


def named_tensors(source):
    """``(name, tensor)`` pairs of a model's weights: a ``nn.Module``'s ``state_dict``, the
    ``*.safetensors`` files of a folder (read one tensor at a time) or, in a folder without them,
    its PyTorch weight files (:data:`~remprop.theory.models.measured_weights.TORCH_WEIGHT_FILES`),
    read with ``torch.load(weights_only=True)``: tensors and plain containers only, never code."""
    if isinstance(source, nn.Module):
        yield from source.state_dict().items()
        return
    files = weight_files(source)
    for path in files:  # before any is opened: a named pipe in a file's place would block the read
        check_regular_file("weights", path)
    if files and files[0].suffix != ".safetensors":
        for path in files:
            yield from _torch_file_tensors(path)
        return
    from safetensors import safe_open

    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    yield name, handle.get_tensor(name)
        except Exception as err:  # a damaged or foreign file: one line naming it
            raise ValueError(f"weights: cannot read {str(path)!r} as safetensors ({type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''})") from None


def _torch_file_tensors(path):
    """The tensors of one PyTorch weight file, loaded without running its pickled code."""
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # a pickled module, a damaged file: one line naming it
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"weights: cannot read {str(path)!r} safely as a state_dict (torch.load with "
                         f"weights_only=True: {type(err).__name__}: {first[:200]})") from None
    if isinstance(loaded, dict) and not any(isinstance(v, torch.Tensor) for v in loaded.values()):
        loaded = next((loaded[k] for k in ("state_dict", "model", "model_state_dict") if isinstance(
            loaded.get(k), dict)), loaded)  # a training checkpoint holding its state_dict
    if not isinstance(loaded, dict) or not any(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ValueError(f"weights: {str(path)!r} holds a {type(loaded).__name__} without tensors, not a "
                         "state_dict (name -> tensor)")
    yield from ((str(k), v) for k, v in loaded.items() if isinstance(v, torch.Tensor))


def _readable(name, tensor, source):
    """Refuse a tensor whose entries are not real numbers the theory can measure (one line naming it)."""
    if tensor.device.type == "meta":
        raise ValueError(f"weights: {name} of {source} is on the meta device (shapes without values): "
                         "load or materialise the weights before checking them")
    if tensor.numel() == 0:
        raise ValueError(f"weights: {name} of {source} has shape {tuple(tensor.shape)}, no entries to measure")
    if not tensor.is_floating_point():
        raise ValueError(f"weights: {name} of {source} has dtype {str(tensor.dtype).replace('torch.', '')}; "
                         "the scales are measured on floating-point weights (dequantise a quantised model "
                         "first)")


def _check_shape(name, role, tensor, spec, source, conv1d):
    """Hold a tensor's shape against the configuration's sizes (d, d_ff, T), naming both."""
    shape = tuple(tensor.shape)
    d, d_ff = spec.width, spec.d_ff

    def refuse(what, expected):
        raise ValueError(f"weights: {name} of {source} has shape {shape}, but its config gives d = {d}, "
                         f"d_ff = {d_ff}: {what} should be {expected} (the config and the weights disagree)")

    if role in _MATRIX_ROLES or role in FUSED_ROLES:
        if len(shape) != 2:
            refuse("it", "a 2-d matrix")
        out, fan_in = (shape[1], shape[0]) if conv1d else shape
        if role in FUSED_ROLES and (fan_in != d or out != fused_rows(role, spec)):
            rows = fused_rows(role, spec)
            refuse("its shape", f"({d}, {rows})" if conv1d else f"({rows}, {d})")
        needs = {"query": ("fan-in", fan_in, d), "key": ("fan-in", fan_in, d), "value": ("fan-in", fan_in, d),
                 "output": ("output width", out, d), "mlp_in": ("fan-in", fan_in, d),
                 "mlp_out": ("fan-in", fan_in, d_ff)}.get(role)
        if needs is not None and needs[1] != needs[2]:
            refuse(f"its {needs[0]}", needs[2])
        if role == "mlp_in" and out != d_ff:
            refuse("its output width", d_ff)
        if role == "mlp_out" and out != d:
            refuse("its output width", d)
    elif role in ("query_norm", "key_norm"):  # QK-norm over a head (d_H) or all heads (H d_H, H_kv d_H)
        if len(shape) != 1:
            refuse("a gain's shape", "1-d")
    elif role in _GAIN_ROLES and shape != (d,):
        refuse("a gain's shape", f"({d},)")
    elif role == "patch" and (len(shape) != 4 or shape[0] != d):
        refuse("a patch projection's shape", f"({d}, channels, patch, patch)")
    elif role in ("word", "position", "token type"):
        if len(shape) != 2 or shape[1] != d:
            refuse("an embedding table's row width", d)
        start = 2 if spec.family == "roberta" else 0
        if role == "position" and shape[0] < start + spec.seq_len:
            raise ValueError(f"weights: {name} of {source} has {shape[0]} position rows, but T = {spec.seq_len} "
                             f"reads rows {start}..{start + spec.seq_len - 1} (give a seq_len of at most "
                             f"{max(shape[0] - start, 0)})")


class _Sums:
    """Running sums of one role: per layer, the sum of squares, the sum and the count."""

    def __init__(self):
        self.layers = defaultdict(lambda: [0.0, 0.0, 0])
        self.fan_in = None

    def add(self, layer, tensor, fan_in=1):
        x = tensor.detach().to(dtype=torch.float64)
        total = self.layers[layer]
        total[0] += float((x * x).sum())
        total[1] += float(x.sum())
        total[2] += x.numel()
        if self.fan_in is not None and fan_in != self.fan_in:
            raise ValueError(f"weights: matrices of one role have fan-ins {self.fan_in} and {fan_in}")
        self.fan_in = fan_in

    def scale(self) -> MatrixScale:
        keys = sorted(self.layers, key=lambda k: (k is None, k))
        squares = sum(self.layers[k][0] for k in keys)
        sums = sum(self.layers[k][1] for k in keys)
        count = sum(self.layers[k][2] for k in keys)
        return MatrixScale(mean_square=squares / count, mean=sums / count, fan_in=int(self.fan_in or 1),
                           entries=int(count), layers=tuple(self.layers[k][0] / self.layers[k][2] for k in keys))


def measure_weights(spec, tensors, source, *, layout=None, inputs=()) -> MeasuredWeights:
    """The scales of a model's weights, by role (:class:`~remprop.theory.models.MeasuredWeights`).

    Parameters
    ----------
    spec : ModelSpec
        The model's configuration (family, sizes, sequence length T: the position rows read).
    tensors : iterable of (str, torch.Tensor)
        Named weights (:func:`named_tensors`).
    source : str
        Where they come from, for messages.
    layout : WeightLayout, optional
        Where the model keeps each role (default: its family's,
        :data:`~remprop.validation.weight_roles.LAYOUTS`; a user's own block:
        :func:`~remprop.validation.weight_roles.module_layout`).
    inputs : sequence of EmbeddingTable
        Input states given rather than measured (a module without embedding tables).

    Returns
    -------
    MeasuredWeights
        Per matrix role the mean square over all its entries and layers and its fan-in; per
        norm the mean squared gain; per embedding table the mean square ``q`` of the rows the
        tokens read and the mean overlap ``p`` of two tokens' rows: words drawn uniformly
        (``p = |mean row|^2 / d``), positions ``0 .. T-1`` (RoBERTa: from 2) distinct
        (``p = (|sum_t P_t|^2 - sum_t |P_t|^2) / (T (T - 1) d)``), the token type of id 0 shared
        (``p = q``).
    """
    family = spec.family
    if layout is None and family not in LAYOUTS:
        raise ValueError(f"weights: measured weights are read for model_type {', '.join(MEASURED_FAMILIES)}; "
                         f"got {family!r}")
    layout = LAYOUTS[family] if layout is None else layout
    patterns = layout.compiled()
    sums = defaultdict(_Sums)
    tables = {}
    blocks = set()
    present = defaultdict(lambda: defaultdict(int))  # role -> layer -> tensors of that role read
    named = {}
    conv1d = layout.conv1d
    for name, tensor in tensors:
        for role, pattern in patterns.items():
            match = pattern.search(name)
            if match is None:
                continue
            _readable(name, tensor, source)
            if role == "position" and tensor.dim() == 3 and tensor.shape[0] == 1:  # ViT's (1, T, d) parameter
                tensor = tensor[0]
            _check_shape(name, role, tensor, spec, source, conv1d)
            layer = int(match.group(1)) if match.groups() and match.group(1) else None
            if layer is not None and role != "norm shift":
                present[role][layer] += 1
                start, end = match.span(1)
                named.setdefault(role, (name[:start], name[end:]))  # its name in any block
            if role in TABLE_ROLES:
                tables[role] = _table(role, tensor, spec)
            elif role in FUSED_ROLES:  # fused projections, split into their parts' roles
                blocks.add(layer)
                for part, chunk, fan_in in split_fused(role, tensor, spec, conv1d):
                    sums[part].add(layer, chunk, fan_in)
            elif role in _MATRIX_ROLES:
                blocks.add(layer)
                sums[role].add(layer, tensor, tensor.shape[0] if conv1d else tensor.shape[1])
            else:
                sums[role].add(layer, tensor + layout.gain_offset if role in _NORM_ROLES else tensor)
            break
    if blocks and len(blocks) != spec.depth:
        raise ValueError(f"weights: {source} holds {len(blocks)} blocks, its config.json says {spec.depth}")
    _check_complete(present, named, blocks, source)
    if "patch" in tables and "patch bias" in sums:  # a bias every patch shares: q and p both gain its mean square
        bias = sums.pop("patch bias").scale().mean_square
        tables["patch"] = EmbeddingTable("patch", tables["patch"].q + bias, tables["patch"].p + bias)
    order = [t for t in TABLE_ROLES if t in tables] + [t.name for t in inputs]
    tables.update({t.name: t for t in inputs})
    weights = MeasuredWeights(
        source=source,
        matrices={role: sums[role].scale() for role in _MATRIX_ROLES if role in sums},
        gains={role: sums[role].scale() for role in _GAIN_ROLES if role in sums},
        embeddings=tuple(tables[t] for t in order),
        mlp_bias=sums["mlp_bias"].scale() if "mlp_bias" in sums else None,
        other_biases={role: sums[role].scale() for role in sums
                      if role not in _MATRIX_ROLES + _GAIN_ROLES + ("mlp_bias",)})
    # the matrices are required by MeasuredWeights itself; a missing gain would read as 1, a missing table as none
    found = set(sums) | set(tables)
    for role in _GAIN_ROLES + TABLE_ROLES:
        if role in layout.roles and role not in found and role not in layout.optional:
            what = role.replace("_", " ") + (" gain" if role in _GAIN_ROLES else " embedding table")
            raise ValueError(f"weights: {source} holds no {_pattern_name(layout.roles[role])} (its {what}); "
                             "a model with tensors missing cannot be measured")
    return weights


def _pattern_name(pattern) -> str:
    """A tensor's name as a role pattern of :data:`ROLE_PATTERNS` spells it, block 0 for its layer index."""
    name = re.sub(r"\(\?:([^|)]*)[^)]*\)", r"\1", pattern)  # (?:gate|up) -> gate
    return name.replace(r"(\d+)", "0").replace("()", "").replace("\\.", ".")


def _check_complete(present, named, blocks, source):
    """Every block holds the tensors of every per-layer role as often as the others do (a block
    without its query matrix would otherwise be measured on the other blocks alone)."""
    for role, layers in present.items():
        most = max(layers.values())
        short = sorted(layer for layer in blocks if layers.get(layer, 0) < most)
        if short:
            head, tail = named[role]
            missing = ", ".join(f"{head}{layer}{tail}" for layer in short[:3]) + (" ..." if len(short) > 3 else "")
            raise ValueError(f"weights: {source} lacks {missing} ({role.replace('_', ' ')} tensors found in "
                             f"{len(layers)} of {len(blocks)} blocks{'' if most == 1 else f', {most} per block'}); "
                             "a model with tensors missing cannot be measured")


def _table(role, tensor, spec) -> EmbeddingTable:
    """One embedding table as the tokens read it (see :func:`measure_weights`)."""
    x = tensor.detach().to(dtype=torch.float64)
    if role == "patch":  # ViT: a (d, C, P, P) projection of i.i.d. pixels of std pixel_std: q = v C P^2 s^2, p = 0
        return EmbeddingTable("patch", float((x * x).mean()) * (x[0].numel()) * spec.pixel_std ** 2, 0.0)
    width = x.shape[1]
    if role == "word":
        return EmbeddingTable("word", float((x * x).mean()), float((x.mean(dim=0) ** 2).sum()) / width)
    if role == "token type":
        q = float((x[0] * x[0]).mean())
        return EmbeddingTable("token type", q, q)
    start = 2 if spec.family == "roberta" else 0  # RoBERTa counts positions from padding_idx + 1
    rows = x[start:start + spec.seq_len]
    count = rows.shape[0]
    total = rows.sum(dim=0)
    p = (float((total * total).sum()) - float((rows * rows).sum())) / (count * (count - 1) * width)
    return EmbeddingTable("position", float((rows * rows).mean()), p)


def own_weights_spec(model, *, seq_len=None, block=None, q0=None, rho0=None):
    """The :class:`~remprop.theory.ModelSpec` of a model with its parameters measured on its weights.

    Parameters
    ----------
    model : transformers.PreTrainedModel, str or os.PathLike
        A ``transformers`` model (an ``nn.Module`` with a ``config``; ``...ForMaskedLM`` and
        ``...ForCausalLM`` wrappers too), or a folder holding its ``config.json`` and
        ``*.safetensors`` weights (what ``save_pretrained`` writes; without them its
        ``pytorch_model.bin`` or ``model.pt`` state_dict, loaded with ``weights_only=True``).
    seq_len : int, optional
        Sequence length T (default: the model's maximum, as :func:`~remprop.theory.model_spec`;
        required for a plain module).
    block : BlockDescription, optional
        A plain module (no ``transformers`` config): the description of its block
        (:class:`~remprop.validation.module_weights.BlockDescription`; default: read off the
        ``torch.nn.TransformerEncoder`` it holds, :func:`~remprop.validation.module_weights.encoder_block`).
    q0, rho0 : float, optional
        A plain module: the input state its first block reads (default 1 and 0, i.i.d.
        unit-variance tokens; :func:`~remprop.validation.module_weights.module_block_spec`).

    Returns
    -------
    ModelSpec
        ``spec.weights`` holds the measured scales.

    Raises
    ------
    ValueError
        ``model`` is neither (naming what it got), the folder holds no weights or no
        ``config.json``, the model's family is not read, a tensor is missing, not floating
        point, on the meta device, or of a shape its configuration's sizes (d, d_ff, T) disagree with.
    """
    if isinstance(model, (str, os.PathLike)):
        folder = Path(model)
        if not folder.is_dir():
            raise ValueError(f"model: no folder {str(model)!r} (expected a transformers model or a folder with "
                             "config.json and *.safetensors)")
        if not holds_weights(folder):
            raise ValueError(f"model: the folder {str(model)!r} holds no *.safetensors weights (nor "
                             f"{', '.join(TORCH_WEIGHT_FILES)})")
        config, source, weights = load_hf_config(folder), str(folder), folder
    elif isinstance(model, nn.Module) and block is None and hasattr(getattr(model, "config", None), "to_dict"):
        config, source, weights = model.config, type(model).__name__, model
    elif isinstance(model, nn.Module):  # plain PyTorch: the block described, or read off its TransformerEncoder
        from .module_weights import module_block_spec

        spec, layout, given, block = module_block_spec(model, block=block, seq_len=seq_len,
                                                       q0=1.0 if q0 is None else q0, rho0=0.0 if rho0 is None else rho0)
        source = type(model).__name__
        spec = measured_spec(spec, measure_weights(spec, named_tensors(model), source, layout=layout, inputs=given))
        return dataclasses.replace(spec, assumptions=block.notes + spec.assumptions)
    else:
        raise ValueError(f"model must be a transformers model (an nn.Module with a config), a torch.nn.Module "
                         f"or a folder with config.json and *.safetensors, got {type(model).__name__}")
    for name, value in (("q0", q0), ("rho0", rho0)):
        if value is not None:
            raise ParameterError(name, f"{name}: a transformers model's input state is measured on its embedding "
                                 "tables (give it for a plain module only)")
    spec = model_spec(config, seq_len=seq_len)
    if spec.family not in MEASURED_FAMILIES:
        raise ValueError(f"model: measured weights are read for model_type {', '.join(MEASURED_FAMILIES)}; "
                         f"got {spec.family!r}")
    spec = measured_spec(spec, measure_weights(spec, named_tensors(weights), source))
    # the report's and the files' name: the folder, or the model's own name (else its class)
    named = isinstance(model, (str, os.PathLike)) or not getattr(model.config, "_name_or_path", "")
    return dataclasses.replace(spec, name=source) if named else spec


def check(model, *, seq_len=None, threshold=None, max_depth=None, max_seconds=MAX_SECONDS, max_memory=MAX_BYTES,
          lr=None, steps=None, warmup=None, batch_tokens=None, beta2=0.999, schedule="linear", block=None, q0=None,
          rho0=None):
    """Diagnose a model as its weights are: ``print(remprop.check(model).report())``.

    Parameters
    ----------
    model : transformers.PreTrainedModel, str or os.PathLike
        See :func:`own_weights_spec`.
    seq_len : int, optional
        Sequence length T (default: the model's maximum).
    threshold : float, optional
        Rank-collapse threshold on the final cosine (default:
        :data:`remprop.diagrams.DEFAULT_THRESHOLD`).
    max_depth : int, optional
        Deepest stack searched for the onset of rank collapse (default:
        :data:`remprop.diagrams.diagnosis.MAX_COLLAPSE_DEPTH`).
    max_seconds, max_memory : float
        The diagnosis's estimated time and memory
        (:func:`~remprop.diagrams.diagnosis_work.diagnosis_seconds`, ``diagnosis_bytes``) above which
        it is refused with a ``ValueError`` holding the estimate, as ``remprop check`` refuses it
        (defaults: the command's ``--max-seconds`` and ``--max-memory``; ``math.inf``: no limit).
    lr : float, optional
        Your AdamW peak rate: the report says whether it lies below, within or above the
        learning-rate ceiling's band (``remprop check --lr``).
    steps, warmup, batch_tokens, beta2, schedule
        The training recipe of the ceiling (``--steps``, ``--warmup``, ``--batch-tokens``,
        ``--beta2``, ``--schedule``; :class:`~remprop.theory.learning_rate.Recipe`; default steps
        :data:`~remprop.theory.learning_rate.DEFAULT_STEPS`, warm-up 5 % of them).
    block, q0, rho0
        A plain module (no ``transformers`` config): see :func:`own_weights_spec`.

    Returns
    -------
    remprop.diagrams.Diagnosis
        What ``remprop check`` prints (``.report()``, ``.to_dict()``), with the measured
        scales in ``.spec.weights``.
    """
    from remprop.diagrams import DEFAULT_THRESHOLD, diagnose
    from remprop.diagrams.diagnosis import MAX_COLLAPSE_DEPTH
    from remprop.diagrams.diagnosis_work import diagnosis_bytes, diagnosis_seconds
    from remprop.theory.checks import check_depth
    from remprop.theory.learning_rate import DEFAULT_STEPS, Recipe

    max_depth = check_depth(MAX_COLLAPSE_DEPTH if max_depth is None else max_depth, name="max_depth")
    check_limit("max_seconds", max_seconds)
    check_limit("max_memory", max_memory)
    recipe = Recipe(DEFAULT_STEPS if steps is None else steps, warmup, batch_tokens, beta2, schedule)
    spec = own_weights_spec(model, seq_len=seq_len, block=block, q0=q0, rho0=rho0)
    check_work(f"the diagnosis of {spec.name} ({spec.depth} layers, d = {spec.width}, T = {spec.seq_len}) with "
               f"max_depth {max_depth}", seconds=diagnosis_seconds(spec, max_depth=max_depth),
               nbytes=diagnosis_bytes(spec, max_depth=max_depth), max_seconds=max_seconds, max_memory=max_memory)
    return diagnose(spec, DEFAULT_THRESHOLD if threshold is None else threshold, max_depth=max_depth,
                    lr_steps=recipe.steps, lr=lr, recipe=recipe)
