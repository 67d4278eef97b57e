"""Published pre-training recipes of real models: the rates they trained at, as data.

``published_recipes.json`` (package data, next to this module) holds one row per recipe: the
shipped configuration of the same width and depth (``model``, :func:`~remprop.theory.models.shipped_configs`),
the published size, initialisation, peak learning rate, warm-up, steps, batch (tokens), AdamW's
``beta2``, weight decay, schedule and the source. They anchor the learning-rate ceiling of
``remprop check`` from outside (issue 41: each published rate trained, so it must lie at or below
the ceiling); the table in docs/training.md ("Published pre-training recipes") is written from
this file and checked against it by ``tests/test_published_recipes.py``.

References
----------
Biderman et al. 2023, arXiv 2304.01373 (Pythia; the training configs of EleutherAI/pythia);
Devlin et al. 2019, arXiv 1810.04805 (BERT); Brown et al. 2020, arXiv 2005.14165 (GPT-3).
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["PublishedRecipe", "published_recipes", "RECIPES_FILE", "SCHEDULES"]

#: The table of published recipes (package data).
RECIPES_FILE = Path(__file__).with_name("published_recipes.json")
#: Learning-rate decay shapes a published recipe may name.
SCHEDULES = ("cosine", "linear")


@dataclass(frozen=True)
class PublishedRecipe:
    """One published pre-training recipe.

    Attributes
    ----------
    name : str
        The recipe's published name (``"Pythia-160M"``, ``"GPT-3 Small (125M)"``).
    model : str
        The shipped configuration of the same width and depth (``remprop check MODEL``).
    parameters, width, depth : int
        Published parameter count, model width d and layer count L.
    init : str
        The initialisation the run used, as far as published.
    peak_lr : float
        Peak learning rate.
    warmup_steps, total_steps : int
        Linear warm-up steps and all steps of the run.
    batch_tokens : int
        Tokens per optimiser step.
    beta2, weight_decay : float
        Adam's second-moment decay and the weight decay.
    schedule : {"cosine", "linear"}
        The decay after the warm-up.
    source, notes : str
        The citation, and what the row's numbers leave out (derived values, phases, doubts).
    """

    name: str
    model: str
    parameters: int
    width: int
    depth: int
    init: str
    peak_lr: float
    warmup_steps: int
    total_steps: int
    batch_tokens: int
    beta2: float
    weight_decay: float
    schedule: str
    source: str
    notes: str

    def to_dict(self) -> dict:
        """The row as in ``published_recipes.json``."""
        return asdict(self)


_COUNTS = ("parameters", "width", "depth", "warmup_steps", "total_steps", "batch_tokens")
_TEXTS = ("name", "model", "init", "source", "notes")


def _recipe(row, index) -> PublishedRecipe:
    """One checked row; a bad field raises ValueError naming the row and the field."""
    where = f"{RECIPES_FILE.name} row {index} ({row.get('name', '?') if isinstance(row, dict) else '?'})"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be a JSON object")
    fields = {name for name in PublishedRecipe.__dataclass_fields__}
    for name in sorted(fields - set(row)):
        raise ValueError(f"{where}: {name} is missing")
    for name in sorted(set(row) - fields):
        raise ValueError(f"{where}: {name} is not a recipe field")
    for name in _COUNTS:
        if isinstance(row[name], bool) or not isinstance(row[name], int) or row[name] < 0:
            raise ValueError(f"{where}: {name} must be a non-negative integer, got {row[name]!r}")
    for name in _TEXTS:
        if not isinstance(row[name], str) or not row[name].strip():
            raise ValueError(f"{where}: {name} must be a non-empty string, got {row[name]!r}")
    for name, low, high in (("peak_lr", 0.0, math.inf), ("beta2", 0.0, 1.0), ("weight_decay", -1.0, math.inf)):
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
            raise ValueError(f"{where}: {name} must be a number in ({low:g}, {high:g}), got {value!r}")
    if row["weight_decay"] < 0:
        raise ValueError(f"{where}: weight_decay must be >= 0, got {row['weight_decay']!r}")
    if not row["warmup_steps"] < row["total_steps"]:
        raise ValueError(f"{where}: warmup_steps ({row['warmup_steps']}) must be below total_steps "
                         f"({row['total_steps']})")
    if row["schedule"] not in SCHEDULES:
        raise ValueError(f"{where}: schedule must be one of {', '.join(SCHEDULES)}, got {row['schedule']!r}")
    return PublishedRecipe(**row)


@functools.lru_cache(maxsize=1)
def published_recipes() -> tuple:
    """The published pre-training recipes (:class:`PublishedRecipe`), in the file's order.

    Read from :data:`RECIPES_FILE`; nothing is written. A malformed row raises ValueError
    naming the row and the field.
    """
    rows = json.loads(RECIPES_FILE.read_text(encoding="utf-8")).get("recipes")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{RECIPES_FILE.name}: 'recipes' must be a non-empty list")
    return tuple(_recipe(row, index) for index, row in enumerate(rows))
