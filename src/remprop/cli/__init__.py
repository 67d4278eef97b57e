"""The ``remprop`` command line: trainability diagrams and signal propagation from the shell.

Commands
--------
=====================  ===========================================================================
``remprop diagram``    trainability diagram over (beta, alpha_SA): PNG + npz + json
``remprop min-alpha``  smallest skip strength alpha_SA that avoids rank collapse at depth L
``remprop propagate``  order parameters q, p, rho layer by layer
``remprop figures``    the paper's reference figures, theory and simulation (PNG + data)
``remprop sweep``      measured trainability diagram: simulated (beta, alpha_SA) grid against the
                       theory, resumable, on dask.distributed (needs the validation extra)
``remprop validate``   the theory against a simulated stack, layer by layer (needs the validation extra)
``remprop check``      diagnose a real model (Hugging Face config) at its default initialisation:
                       its place on the diagram, per-layer cosine, changes that would help
=====================  ===========================================================================

Exit status: 0 on success, 2 on bad input (one line on stderr naming the parameter),
1 on an unexpected error (one line; ``REMPROP_DEBUG=1`` shows the traceback).

Layout: :mod:`.entry` (entry point, errors to exit statuses), :mod:`.parser` (the
parser), :mod:`.options` (option groups shared by commands, the Architecture options),
:mod:`.converters` (checked values and grids), :mod:`.output` (JSON, tables),
:mod:`.errors`, and :mod:`.commands` (one module per command group). Importing this
package imports neither torch nor matplotlib; the commands import what they use.

The option helpers :func:`add_architecture_arguments` and :func:`architecture_from_args`
are public, for other command lines that describe an Architecture.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from .commands import COMMANDS
from .entry import main
from .options import add_architecture_arguments, architecture_from_args
from .parser import build_parser

__all__ = ["main", "build_parser", "add_architecture_arguments", "architecture_from_args", "COMMANDS"]
