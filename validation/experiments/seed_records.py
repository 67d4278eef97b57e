"""The per-seed records a simulation keeps (``check --simulate``: ``NAME.simulation/cells/seed-<n>.json``).

Each finished initialisation of :func:`remprop.validation.hf_models.simulate_model` is kept
as one record of a :class:`~remprop.validation.experiments.cell_store.CellStore`, so an
interrupted run resumes. A record is reused only when it is the one written: it carries its
format tag, its seed, the SHA-256 of its measurement (:func:`~remprop.validation.experiments.cell_store.json_sha256`, as the grid
stores' cells do) and a measurement of the expected shape (every statistic a rectangle of
``sequences`` rows); a record that fails any of these -- truncated, edited (a number changed
or a NaN written in), another seed's -- is moved aside with a
:class:`~remprop.validation.experiments.cell_store.DamagedRecordWarning` naming it and the
seed is measured again.
"""
from __future__ import annotations

import numpy as np

from remprop._json import to_jsonable

from .cell_store import CellStore, json_sha256

__all__ = ["SEED_FORMAT", "seed_key", "seed_record", "seed_record_problem", "seed_store", "stored_measurement"]

#: Format tag of one seed's record.
SEED_FORMAT = "remprop.simulate_model.seed/2"


def seed_key(seed) -> str:
    """The store key of a seed: ``seed-<n>``."""
    return f"seed-{int(seed)}"


def seed_record(seed, measurement: dict) -> dict:
    """The record kept for one seed's measurement (statistic name -> nested lists)."""
    measurement = to_jsonable(measurement)  # a measured NaN is kept as "nan" (strict JSON)
    return {"format": SEED_FORMAT, "seed": int(seed), "measurement": measurement, "checksum": json_sha256(measurement)}


def seed_record_problem(key, record, *, names, sequences):
    """Why ``record`` is not a valid record of ``key`` (None when it is): format, seed, checksum,
    the statistics ``names`` present, each ``sequences`` rows of one length of numbers."""
    if record.get("format") != SEED_FORMAT:
        return f"format {record.get('format')!r} is not {SEED_FORMAT!r}"
    seed = record.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed_key(seed) != key:
        return f"it is the record of seed {seed!r}, not of {key!r}"
    measurement = record.get("measurement")
    if not isinstance(measurement, dict) or record.get("checksum") != json_sha256(measurement):
        return "the checksum of its measurement does not match"
    if sorted(measurement) != sorted(names):
        return f"it holds the statistics {sorted(measurement)}, not {sorted(names)}"
    for name, rows in measurement.items():
        try:
            values = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            return f"its {name} is not a rectangle of numbers"
        if values.ndim < 2 or values.shape[0] != sequences:
            return f"its {name} has shape {values.shape}, not {sequences} sequence rows"
    return None


def seed_store(directory, manifest: dict, *, names, sequences) -> CellStore:
    """The store of a simulation's seeds in ``directory``, every record checked on reading."""
    names = tuple(names)
    return CellStore(directory, manifest,
                     check=lambda key, record: seed_record_problem(key, record, names=names, sequences=sequences))


def stored_measurement(store: CellStore, seed):
    """The kept measurement of ``seed`` (statistic -> lists), or None where there is none; a
    damaged record is moved aside (:meth:`~remprop.validation.experiments.cell_store.CellStore.quarantine`, one warning) and None returned."""
    key = seed_key(seed)
    record, problem = store.inspect(key)
    if problem is not None:
        store.quarantine(key, problem)
        return None
    return None if record is None else record["measurement"]
