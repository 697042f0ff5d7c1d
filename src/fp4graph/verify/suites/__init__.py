"""Upstream's own test suites as the regression gate of a patched wheel.

A patched wheel replaces its upstream package for everything, not only for the code a series
changes; distribution packagers gate such a package on upstream's own tests (Debian
autopkgtest, conda-forge's ``test:``).  For one stack and project:

1. :mod:`.selection`: which upstream files run (the data table, with a time budget each);
2. :mod:`.source`: upstream's files at the commit ``source`` pins in patches/stacks.toml, from
   GitHub or a local clone; a tag that names another commit is refused;
3. :mod:`.prepare`: a :mod:`.bundle` of those files and two installs, the patched and the
   pristine wheels (``pip install --no-deps --target``), with the stack's companion wheels;
   ``--pack`` writes it as one ``.tar.xz``, so it can be made where GitHub and PyPI are
   reachable and run on a GPU machine that reaches neither;
4. :mod:`.run`: each file in a fresh pytest process per install (:mod:`.plugin` records each
   test as it goes), patched first, then pristine;
5. :mod:`.report`: the outcomes compared test by test: a test that passes pristine and fails
   patched is a regression and fails the gate; a file that runs out of time is reported as
   such, never as a failure of the wheel.

:mod:`.gate` holds the steps, :mod:`.workflow` strings them together for ``fp4graph suites``
(:func:`run_suites`, with the verdict: a regression and an inconclusive run both fail), and
:mod:`.interpreter` checks, before anything runs, that the test interpreter has what the
tests import.  Nothing here imports torch: the tests run in child interpreters.
"""

from ...model.errors import SuiteError
from .bundle import Bundle, check_bundle_pin, jit_difference, open_bundle, pack
from .gate import (
    Plan,
    check_requirements,
    cuda_available,
    gate_bundle,
    open_bundles,
    plan,
    prepare_stack,
)
from .interpreter import unmet
from .prepare import prepare_bundle, requirements
from .report import markdown
from .run import RunOptions, run_bundle
from .selection import FLASHINFER, SELECTIONS, SGLANG, Selection, SeriesTests, SuiteFile, select
from .workflow import SuitesOptions, SuitesResult, Verdict, run_suites

__all__ = [
    "FLASHINFER", "SELECTIONS", "SGLANG", "Bundle", "Plan", "RunOptions", "SeriesTests",
    "Selection", "SuiteError", "SuiteFile", "SuitesOptions", "SuitesResult", "Verdict",
    "check_bundle_pin", "check_requirements", "cuda_available", "gate_bundle", "jit_difference",
    "markdown", "open_bundle", "open_bundles", "pack", "plan", "prepare_bundle", "prepare_stack",
    "requirements", "run_bundle", "run_suites", "select", "unmet",
]
