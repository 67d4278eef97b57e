"""The experiments built on the simulator: sweeps over (alpha, beta) grids and their cell store,
measured diagrams, the acceptance cases, and the simulated parts of the paper figures.

The simulator and its measurements live one level up (:mod:`remprop.validation`); training runs in
:mod:`remprop.validation.training`.
"""
