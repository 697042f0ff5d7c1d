"""A pytest plugin: upstream's tests on a host without a GPU, torch's device queries
answered as an SM120 card while the tests are imported (``verify.simulate``).

``python -m pytest -p fp4graph.verify.pytest_simulated_gpu tests/...``: some upstream
trees read device properties at import (flashinfer main's ``gdn_kernels``), so no test
imports them on a CPU-only host without this.  Once collected, the tests run with
``torch.cuda.is_available()`` False (what the host has; Dynamo then leaves the CUDA RNG
alone), the capability queries still answering SM120.  No kernel runs: say "simulated"
wherever such a run is reported.
"""

from __future__ import annotations

from typing import Any

from . import simulate

# At import: ``-p`` plugins load before the tree's conftest.py, which may import the
# package under test.
simulate.install()


def pytest_collection_finish(session: Any) -> None:
    simulate._available.append(False)
