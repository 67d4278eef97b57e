"""One result type for every (alpha, beta) grid: the theory's, the measured and the trained diagram.

A trainability diagram of the theory (:class:`~remprop.diagrams.TrainabilityDiagram`), a
measured one (:class:`~remprop.validation.experiments.measured_diagram.MeasuredDiagram`) and a trained
one (:class:`~remprop.validation.training.trained_diagram.TrainedDiagram`) hold the same
kind of thing: phase codes and other numbers per cell of a grid of attention skip
strengths ``alphas`` (rows) and query/key scales ``betas`` (columns), the settings that
decided them, where they were computed and, for the measured and trained ones, the
theory's prediction on the same grid. :class:`GridResult` holds exactly that, and its
files are the one format of all three (:data:`GRID_FORMAT`). Each diagram type is a typed
view on one (:class:`GridView`): its attributes read the grid's named arrays, and its
settings object (a :class:`~remprop.theory.RunSettings`, a sweep's or a training grid's
spec) is rebuilt from the grid's settings when a file is loaded.

Files
-----
``<path>.npz`` holds everything: ``format``, ``meta`` (the header below as JSON text),
``alphas``, ``betas``, every named array, and the prediction's arrays as
``predicted.<name>``. ``<path>.json`` is the readable summary in strict JSON (non-finite
numbers as ``"inf"``/``"nan"``, as ``remprop._json`` writes them): ``format``, ``kind``, ``axes``,
``alphas``, ``betas``, ``labels`` (phase code -> label), ``settings``, ``values`` (derived
numbers: agreements, losses, ...), ``provenance`` (devices, the writing remprop),
``array_axes`` (the axes of every array), ``summary`` and ``arrays`` (the values of the
arrays named in ``summary``; per-layer arrays stay in the npz), and ``predicted``, the
same for the prediction. Files of an older format are read where a view says how
(:meth:`GridView.load`).
"""
from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from remprop._json import to_jsonable
from remprop.theory.checks import check_choice, check_grid_axis

from .phases import confusion

__all__ = ["GridResult", "GridView", "ComparedView", "GRID_FORMAT", "GRID_KINDS", "CELL_AXES", "cell_array",
           "check_arrays", "base_path", "suffixed", "require", "text_member", "scalar_member"]

#: Format tag of every saved grid result (npz and JSON).
GRID_FORMAT = "remprop.grid_result/1"
#: What a grid result can be: the theory's diagram, a measured or a trained one.
GRID_KINDS = ("theory", "measured", "trained")
#: The axes of a cell array: rows alphas, columns betas.
CELL_AXES = ("alpha", "beta")
#: npz members that are not named arrays.
_RESERVED = ("format", "meta", "alphas", "betas")
#: Prefix of the prediction's arrays in the npz file.
_PREDICTED = "predicted."
_UNREADABLE = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True, eq=False)
class GridResult:
    """Numbers over an ``(alpha, beta)`` grid, their settings and provenance, savable as one format.

    Parameters
    ----------
    kind : {"theory", "measured", "trained"}
        What the grid holds (:data:`GRID_KINDS`).
    alphas : array_like
        Attention skip strengths of the rows, 1-d, >= 0.
    betas : array_like
        Query/key scales of the columns, 1-d, > 0.
    arrays : dict
        Name -> array of numbers. ``phase`` is required: the phase code of every cell,
        shape ``(len(alphas), len(betas))``, each code a key of ``labels``.
    axes : dict
        Name -> the axis names of that array (one per dimension). ``"alpha"`` and
        ``"beta"`` must have the grid's lengths; others (``"layer"``, ``"step"``) are free.
    labels : dict
        Phase code -> label.
    settings : dict
        What decided the numbers, JSON-ready (an architecture, a depth, a sweep's manifest).
    values : dict, optional
        Derived numbers that are not per cell (agreements, losses), JSON-ready.
    provenance : dict, optional
        Where the numbers were computed (devices), JSON-ready.
    summary : tuple of str
        The arrays whose values the JSON summary lists too (default ``("phase",)``).
    predicted : GridResult, optional
        The theory's grid result on the same grid (for a measured or trained result).

    Raises
    ------
    ValueError
        Naming the first field that is inconsistent: an axis, an array whose shape
        disagrees with its axes, a phase code without a label, a prediction on another grid.
    """

    kind: str
    alphas: np.ndarray
    betas: np.ndarray
    arrays: dict
    axes: dict
    labels: dict
    settings: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    summary: tuple = ("phase",)
    predicted: "GridResult | None" = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        check_choice("kind", self.kind, GRID_KINDS)
        alphas = check_grid_axis("alphas", self.alphas, nonnegative=True)
        betas = check_grid_axis("betas", self.betas, positive=True)
        set_("alphas", alphas)
        set_("betas", betas)
        set_("labels", _labels(self.labels))
        if not isinstance(self.arrays, dict) or not isinstance(self.axes, dict) or set(self.arrays) != set(self.axes):
            raise ValueError("axes: one tuple of axis names per array, for exactly the arrays given")
        sizes = {"alpha": alphas.size, "beta": betas.size}
        arrays, axes = {}, {}
        for name, value in self.arrays.items():
            if not (isinstance(name, str) and name.isidentifier()) or name in _RESERVED:
                raise ValueError(f"arrays: {name!r} is not a name for an array (an identifier, none of {_RESERVED})")
            value, names = np.asarray(value), tuple(self.axes[name])
            expected = tuple(sizes.get(axis, value.shape[k] if k < value.ndim else -1) for k, axis in enumerate(names))
            if value.dtype.kind not in "biuf" or value.shape != expected:
                raise ValueError(f"{name} has shape {value.shape} (dtype {value.dtype}), expected numbers on the axes "
                                 f"{names} for {alphas.size} alphas x {betas.size} betas")
            arrays[name], axes[name] = value, names
        if axes.get("phase") != CELL_AXES:
            raise ValueError(f"phase: a grid result holds the phase code of every cell, on the axes {CELL_AXES}")
        if not np.isin(arrays["phase"], list(self.labels)).all():
            raise ValueError(f"phase holds codes outside {sorted(self.labels)}")
        arrays["phase"] = arrays["phase"].astype(np.int8, copy=False)
        set_("arrays", arrays)
        set_("axes", axes)
        summary = tuple(self.summary)
        if not set(summary) <= set(arrays):
            raise ValueError(f"summary names arrays that are not there: {sorted(set(summary) - set(arrays))}")
        set_("summary", summary)
        for name in ("settings", "values", "provenance"):
            value = to_jsonable(getattr(self, name))
            if not isinstance(value, dict):
                raise ValueError(f"{name} must be a dict, got {type(getattr(self, name)).__name__}")
            set_(name, value)
        if self.predicted is not None:
            p = self.predicted
            if not isinstance(p, GridResult) or p.kind != "theory" or p.predicted is not None:
                raise ValueError("predicted must be the theory's GridResult (kind 'theory')")
            if self.kind == "theory":
                raise ValueError("predicted: a theory grid is itself the prediction")
            if not (np.array_equal(p.alphas, alphas) and np.array_equal(p.betas, betas)):
                raise ValueError("predicted lies on another grid than the result (alphas or betas differ)")

    @property
    def shape(self) -> tuple:
        """``(len(alphas), len(betas))``."""
        return self.alphas.size, self.betas.size

    def fractions(self) -> dict:
        """Fraction of cells in each phase, keyed by label."""
        counts = np.bincount(self.arrays["phase"].ravel().astype(np.int64), minlength=max(self.labels) + 1)
        return {label: counts[code] / self.arrays["phase"].size for code, label in self.labels.items()}

    # -- files ----------------------------------------------------------------------------
    def header(self) -> dict:
        """Everything but the numbers of the arrays, JSON-ready (the npz's ``meta``)."""
        from remprop import __version__

        return {"kind": self.kind, "labels": {str(code): label for code, label in self.labels.items()},
                "settings": self.settings, "values": self.values, "provenance": self.provenance,
                "array_axes": {name: list(axes) for name, axes in self.axes.items()}, "summary": list(self.summary),
                "predicted": None if self.predicted is None else self.predicted.header(),
                "written_by": f"remprop {__version__}"}

    def to_json(self) -> dict:
        """The JSON summary: :meth:`header`, the grid and the arrays named in ``summary`` (see the module notes)."""
        def with_arrays(grid, header):
            header = dict(header, arrays={name: to_jsonable(grid.arrays[name]) for name in grid.summary})
            if grid.predicted is None:
                del header["predicted"]
            else:
                header["predicted"] = with_arrays(grid.predicted, header["predicted"])
            return header

        body = with_arrays(self, self.header())
        return {"format": GRID_FORMAT, "kind": self.kind, "axes": list(CELL_AXES), "alphas": self.alphas.tolist(),
                "betas": self.betas.tolist(), **body}

    def save(self, path) -> tuple:
        """Write ``<path>.npz`` (everything) and ``<path>.json`` (the summary); return both paths.

        A trailing ``.npz``, ``.json`` or ``.png`` on ``path`` is dropped; folders are created.
        """
        base = base_path(path)
        base.parent.mkdir(parents=True, exist_ok=True)
        npz_path, json_path = base.with_name(base.name + ".npz"), base.with_name(base.name + ".json")
        arrays = dict(self.arrays)
        if self.predicted is not None:
            arrays.update({_PREDICTED + name: value for name, value in self.predicted.arrays.items()})
        with open(npz_path, "wb") as handle:
            np.savez(handle, format=np.array(GRID_FORMAT), meta=np.array(json.dumps(self.header(), allow_nan=False)),
                     alphas=self.alphas, betas=self.betas, **arrays)
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(self.to_json(), handle, allow_nan=False)
        return npz_path, json_path

    @classmethod
    def load(cls, path, *, older=None) -> "GridResult":
        """Read a grid result written by :meth:`save` (from ``<path>.npz``), every field checked again.

        Parameters
        ----------
        path : str or Path
            With or without the ``.npz`` suffix.
        older : callable, optional
            ``older(arrays) -> GridResult or None``, tried first on a file of another
            format (``arrays``: its members by name): how a view reads its previous
            format, or raises a ``ValueError`` saying what to run again.

        Raises
        ------
        ValueError
            One line naming the file, for any damage: truncated, not a NumPy zip, missing
            arrays, another format, an unreadable header, shapes that disagree.
        FileNotFoundError
            No such file.
        """
        npz_path = suffixed(path, ".npz")
        try:
            data = _read_npz(npz_path)
            fmt = text_member(data, "format") if "format" in data else None
            if fmt != GRID_FORMAT:
                converted = older(data) if older is not None else None
                if converted is not None:
                    return converted
                if fmt is None:
                    require(data, ("format",))
                raise ValueError(f"format {fmt!r} is not {GRID_FORMAT!r}")
            require(data, ("meta", "alphas", "betas"))
            try:
                meta = json.loads(text_member(data, "meta"))
            except json.JSONDecodeError:
                raise ValueError("meta is not JSON text") from None
            return cls._from_meta(meta, data, "")
        except ValueError as err:
            raise ValueError(f"path: {npz_path} is not a valid saved grid result ({err})") from None

    @classmethod
    def _from_meta(cls, meta, data, prefix) -> "GridResult":
        try:
            names = list(meta["array_axes"])
            require(data, [prefix + name for name in names])
            predicted = meta.get("predicted")
            return cls(kind=meta["kind"], alphas=data["alphas"], betas=data["betas"],
                       arrays={name: data[prefix + name] for name in names}, axes=meta["array_axes"],
                       labels=meta["labels"], settings=meta["settings"], values=meta.get("values", {}),
                       provenance=meta.get("provenance", {}), summary=meta.get("summary", ("phase",)),
                       predicted=None if predicted is None else cls._from_meta(predicted, data, _PREDICTED))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"meta: not a grid result header ({type(err).__name__}: {err})") from None


class GridView:
    """A typed view on a :class:`GridResult`: what the three diagram types share.

    A view is a frozen dataclass whose first field is ``grid``; its arrays are read through
    properties (:func:`cell_array`). Subclasses set :attr:`KIND`, build themselves from a
    grid in :meth:`from_grid` (checking its settings) and may read an older file format in
    ``_older``.
    """

    #: The grid's ``kind``.
    KIND: ClassVar[str] = ""
    #: Whether :meth:`save` draws the figure unless told.
    SAVES_FIGURE: ClassVar[bool] = False

    alphas = property(lambda self: self.grid.alphas, doc="Attention skip strengths of the rows.")
    betas = property(lambda self: self.grid.betas, doc="Query/key scales of the columns.")
    phase = property(lambda self: self.grid.arrays["phase"], doc="Phase codes of the cells, shape (alphas, betas).")

    def fractions(self) -> dict:
        """Fraction of cells in each phase, keyed by label."""
        return self.grid.fractions()

    def to_dict(self) -> dict:
        """The JSON summary (:meth:`GridResult.to_json`)."""
        return self.grid.to_json()

    def save(self, path, *, figure=None) -> list:
        """Write ``<path>.npz`` and ``<path>.json`` (:meth:`GridResult.save`) and, with ``figure``
        (default: the view's :attr:`SAVES_FIGURE`), ``<path>.png`` of :meth:`figure`; return the paths."""
        written = list(self.grid.save(path))
        if self.SAVES_FIGURE if figure is None else figure:
            png = suffixed(path, ".png")
            self.figure().savefig(png, dpi=150)
            written.append(png)
        return written

    @classmethod
    def load(cls, path):
        """Read a view saved by :meth:`save`: the grid (:meth:`GridResult.load`), then its settings.

        Raises
        ------
        ValueError
            One line naming the file: a damaged file, another kind of grid, settings that
            are not valid, or an older format that cannot be read (saying what to run again).
        FileNotFoundError
            No such file.
        """
        grid = GridResult.load(path, older=cls._older)
        try:
            if grid.kind != cls.KIND:
                raise ValueError(f"it holds a {grid.kind} grid, not a {cls.KIND} one")
            return cls.from_grid(grid)
        except (ValueError, TypeError, KeyError) as err:
            raise ValueError(f"path: {suffixed(path, '.npz')} is not a valid saved {cls.__name__} ({err})") from None

    @classmethod
    def from_grid(cls, grid: GridResult):
        """The view of ``grid`` (its settings checked); ``ValueError`` when they are not valid."""
        raise NotImplementedError

    @classmethod
    def _older(cls, data: dict):
        """A grid result from the members ``data`` of a file in a previous format, or None."""
        return None

    def figure(self):
        """The view's figure (a matplotlib Figure, not registered with pyplot)."""
        raise NotImplementedError

    def plot(self, **options):
        """:meth:`figure` made through ``pyplot.figure``, so Jupyter shows it (and
        ``pyplot.show()`` in a script); ``options`` go to :meth:`figure`. Returns the Figure."""
        from .style import pyplot_figures

        with pyplot_figures():
            return self.figure(**options)


class ComparedView(GridView):
    """A view whose grid carries the theory's prediction (``predicted``): agreement and confusion."""

    SAVES_FIGURE = True

    @property
    def agrees(self) -> np.ndarray:
        """Per cell: the phase equals the predicted phase."""
        return self.phase == self.predicted.phase

    @property
    def agreement(self) -> float:
        """Fraction of cells whose phase is the predicted one."""
        return float(self.agrees.mean())

    def confusion(self) -> dict:
        """Counts ``{predicted label: {label: cells}}`` (:func:`remprop.diagrams.phases.confusion`)."""
        return confusion(self.predicted.phase, self.phase, self.grid.labels)

    @staticmethod
    def comparison_values(phase, predicted_phase, labels) -> dict:
        """The values every compared grid stores: agreement, cells agreeing, cells, confusion."""
        agrees = phase == predicted_phase
        return {"agreement": float(agrees.mean()), "cells_agreeing": int(agrees.sum()), "cells": int(agrees.size),
                "confusion": confusion(predicted_phase, phase, labels)}


def cell_array(name, doc):
    """A read-only property returning the array ``name`` of the view's grid."""
    return property(lambda self: self.grid.arrays[name], doc=doc)


def check_arrays(grid: GridResult, expected: dict):
    """``ValueError`` unless ``grid`` holds every array of ``expected`` (name -> axes) on those axes."""
    for name, axes in expected.items():
        if grid.axes.get(name) != tuple(axes):
            found = "missing" if name not in grid.axes else f"on the axes {grid.axes[name]}"
            raise ValueError(f"{name}: {found}; a {grid.kind} grid holds it on the axes {tuple(axes)}")


# -- files ------------------------------------------------------------------------------------
def base_path(path) -> Path:
    """``path`` without a trailing ``.npz``, ``.json`` or ``.png``."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".npz", ".json", ".png") else path


def suffixed(path, suffix) -> Path:
    """``<path><suffix>`` after :func:`base_path`."""
    base = base_path(path)
    return base.with_name(base.name + suffix)


def _read_npz(npz_path) -> dict:
    """Every member of an npz file; ``ValueError`` (without the file name) for a damaged file."""
    try:
        data = np.load(npz_path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except _UNREADABLE as err:  # truncated, or not an npz file at all
        raise ValueError(f"not a NumPy npz archive ({type(err).__name__})") from None
    if not hasattr(data, "files"):
        raise ValueError("a single .npy array, not an npz archive")
    with data:
        try:
            return {name: data[name] for name in data.files}
        except _UNREADABLE as err:  # a damaged member
            raise ValueError(f"unreadable arrays ({type(err).__name__}: {err})") from None


def require(data: dict, names):
    """``ValueError`` naming the members of ``names`` that ``data`` lacks."""
    missing = [name for name in names if name not in data]
    if missing:
        raise ValueError(f"missing arrays {', '.join(missing)}")


def text_member(data: dict, name: str) -> str:
    """The string stored as member ``name`` (a 0-d unicode array)."""
    value = data[name]
    if value.ndim != 0 or value.dtype.kind != "U":
        raise ValueError(f"{name} must be a string, got an array of dtype {value.dtype} and shape {value.shape}")
    return str(value)


def scalar_member(data: dict, name: str):
    """The scalar stored as member ``name``."""
    value = data[name]
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
    return value[()]


def _labels(labels) -> dict:
    """Phase code (int) -> label (str); JSON's string keys are read back as ints."""
    if not isinstance(labels, dict) or not labels:
        raise ValueError("labels must be a non-empty dict of phase code -> label")
    try:
        out = {int(code): str(label) for code, label in labels.items()}
    except (TypeError, ValueError):
        raise ValueError(f"labels: codes must be integers, got {sorted(map(str, labels))}") from None
    if min(out) < 0:
        raise ValueError("labels: codes must be >= 0")
    return dict(sorted(out.items()))
