"""The ``remprop`` sub-commands, one module per group.

* :mod:`.theory` -- ``diagram``, ``min-alpha``, ``propagate`` (the theory alone);
* :mod:`.figures` -- ``figures`` (the paper's reference figures);
* :mod:`.simulation` -- ``sweep``, ``validate`` (against simulated networks; validation extra);
* :mod:`.check` -- ``check`` (a real model at its default initialisation);
* :mod:`.lr_sweep` -- ``lr-sweep`` (the measured learning-rate sweep; validation extra);
* :mod:`.acceptance` -- ``acceptance`` (the acceptance cases of issue 14; validation extra);
* :mod:`.precompile` -- ``precompile`` (compile the kernels of the built-in commands ahead of use).

Each ``add_*_parser(commands)`` adds one sub-parser whose ``handler`` default is the
function that runs it: ``handler(args)`` returns the exit status.
"""
from __future__ import annotations

from .acceptance import add_acceptance_parser
from .check import add_check_parser
from .figures import add_figures_parser
from .lr_sweep import add_lr_sweep_parser
from .precompile import add_precompile_parser
from .recipes import add_recipes_parser
from .simulation import add_sweep_parser, add_validate_parser
from .theory import add_diagram_parser, add_min_alpha_parser, add_propagate_parser
from .trained_diagram import add_trained_diagram_parser
from .training import add_train_parser

__all__ = ["PARSERS", "COMMANDS"]

#: Sub-command -> the function that adds its parser, in the order of ``remprop --help``.
PARSERS = {
    "diagram": add_diagram_parser,
    "min-alpha": add_min_alpha_parser,
    "propagate": add_propagate_parser,
    "figures": add_figures_parser,
    "sweep": add_sweep_parser,
    "validate": add_validate_parser,
    "check": add_check_parser,
    "recipes": add_recipes_parser,
    "trained-diagram": add_trained_diagram_parser,
    "lr-sweep": add_lr_sweep_parser,
    "train": add_train_parser,
    "acceptance": add_acceptance_parser,
    "precompile": add_precompile_parser,
}

#: Sub-commands, in the order of ``remprop --help``.
COMMANDS = tuple(PARSERS)
