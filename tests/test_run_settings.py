"""RunSettings is validated once, at the door, and the functions below it trust it.

docs/architecture.md: a trainability diagram builds one RunSettings; propagate, final_state,
pack_parameters and alpha_star take it in place of the architecture and check
none of its fields again, while their own arguments are still checked for direct callers.
"""
from __future__ import annotations

import numpy as np
import pytest

from remprop.diagrams import alpha_star, trainability_diagram
from remprop.theory import Architecture, RunSettings, final_state, propagate, softcap
from remprop.theory.propagation import pack_parameters

ARCH = Architecture(norm="pre", heads=2, qk_scaling="head")


def test_a_run_gives_the_numbers_of_its_fields():
    run = RunSettings(ARCH, np.array([0.3, 0.9]), 7, q0=1.5, rho0=0.2, threshold=0.95)
    by_fields = propagate(ARCH, [0.3, 0.9], 7, 1.5, 0.2)
    by_run = propagate(run)
    np.testing.assert_array_equal(by_run.rho, by_fields.rho)
    np.testing.assert_array_equal(by_run.beta_critical, by_fields.beta_critical)
    for name, value in final_state(run).items():
        np.testing.assert_array_equal(value, final_state(ARCH, [0.3, 0.9], 7, 1.5, 0.2)[name])
    np.testing.assert_array_equal(alpha_star(run),
                                  alpha_star(ARCH, [0.3, 0.9], 7, 0.95, q0=1.5, rho0=0.2))
    shape, size, rows = pack_parameters(run)
    _, _, direct = pack_parameters(ARCH, [0.3, 0.9], 1.5, 0.2)
    assert shape == (2,) and size == 2
    np.testing.assert_array_equal(rows(0, 2), direct(0, 2))


def test_over_alphas_is_the_grid_of_cells():
    run = RunSettings(ARCH, np.array([0.3, 0.9, 2.0]), 5)
    cells = run.over_alphas([0.0, 1.0])
    assert cells.beta.shape == (1, 3) and np.shape(cells.arch.alpha_sa) == (2, 1)
    assert (cells.depth, cells.q0, cells.rho0, cells.threshold) == (5, 1.0, 0.0, run.threshold)
    np.testing.assert_array_equal(final_state(cells)["rho"][1],
                                  final_state(ARCH.replace(alpha_sa=1.0), run.beta, 5)["rho"])
    with pytest.raises(ValueError, match="^alphas must be >= 0"):
        run.over_alphas([-1.0])


@pytest.mark.parametrize("call", [
    lambda run: propagate(run, 0.5), lambda run: propagate(run, depth=3), lambda run: final_state(run, q0=1.0),
    lambda run: pack_parameters(run, rho0=0.1), lambda run: alpha_star(run, threshold=0.9),
])
def test_a_field_given_beside_its_run_is_refused(call):
    with pytest.raises(ValueError, match=r"^\w+: given beside a RunSettings"):
        call(RunSettings(ARCH, 0.5, 3))


def test_direct_callers_are_still_checked():
    with pytest.raises(ValueError, match="^beta must be > 0"):
        propagate(ARCH, -1.0, 3)
    with pytest.raises(ValueError, match="^beta must be given"):
        final_state(ARCH, depth=3)
    with pytest.raises(ValueError, match="^depth must be an integer >= 1"):
        propagate(ARCH, 0.5)
    with pytest.raises(ValueError, match="^arch must be a remprop.theory.Architecture"):
        pack_parameters("post", 0.5)
    with pytest.raises(ValueError, match="^threshold"):
        alpha_star(ARCH, 0.5, 3, threshold=1.5)


def test_the_softcap_is_checked_with_the_run():
    """The run holds every check the kernels need: the cap too, so nothing below repeats it."""
    capped = Architecture(norm="pre", seq_len=1024, logit_softcap=1.0)
    with pytest.raises(ValueError, match="^logit_softcap = 1 is too small"):
        RunSettings(capped, 5.0, 3)
    with pytest.raises(ValueError, match="^logit_softcap = 1 is too small"):
        propagate(capped, 5.0, 3)


def test_a_diagram_checks_its_run_once(monkeypatch):
    """The diagram's kernels and its alpha* search are given the run and check none of its fields again."""
    calls = []
    original = softcap.check_logit_softcap
    monkeypatch.setattr(softcap, "check_logit_softcap",
                        lambda arch, beta, q0=1.0: calls.append(np.shape(beta)) or original(arch, beta, q0))
    diagram = trainability_diagram(ARCH, [0.5, 1.0, 2.0], [0.0, 1.0], 4)
    assert calls == [(3,)]  # RunSettings, once; not again in final_state nor in alpha_star
    assert diagram.phase.shape == (2, 3)
    calls.clear()
    propagate(ARCH, 0.5, 3)
    assert calls == [()]  # a direct call checks its own arguments
