"""``python -m fp4graph drift``: which patches still apply to which upstream release.

For every release on the index of each project from its ``first_drift_release`` on
(``model.projects``: flashinfer-python 0.6.0, sglang 0.5.8), each patch of the nearest
series (the highest series version <= the release, else the lowest) is classified, in
series order, and each cell carries the patch's topic: the report's columns are topics, so
a column means the same change in every release whatever the patch's number:

- ``upstream``: ``git apply -R --check`` succeeds (the release already has the patch);
- ``applies``: ``git apply --check`` succeeds (then it is applied, so the next patch
  is checked on top of it, as the series is built);
- ``superseded``: it does not apply, and upstream's own code does what it does: an
  ``UpstreamFix`` of the project names every topic of the patch and all of its evidence
  holds in the release (``model.projects``).  A fix with only part of its evidence (one op
  of several registered, say) is named in the cell's detail, and the patch stays needed;
- ``conflicts``: neither;
- ``unchecked``: every file it touches lies outside the release's wheel (upstream
  tests, docs).

Only the files the patches (and detectors) name are read: from the release's wheel
through HTTP range requests (the zip's central directory, then each member), or
streamed out of the sdist when there is no wheel.  The release list and every
extracted file are cached under ``<cache>/drift/``; a second run reads no artifact.

The jobs, one module each: :mod:`.releases` (the release list), :mod:`.http_zip` (a remote
wheel read by range requests), :mod:`.release_files` (the cached files of a release),
:mod:`.upstream_fixes` (upstream's own fixes, by their evidence), :mod:`.classify` (a status
per patch and release), :mod:`.report` (the matrix, drift.md / drift.json, the issue) and
:mod:`.workflow` (the command's run: classify, report, update the issue).
"""

from .classify import STATUSES, Cell, classify_release, drift
from .release_files import ReleaseFiles
from .releases import Release, cached_file_urls, releases
from .report import SYMBOL, markdown, needs_attention, report_to_github, text_matrix, write_reports
from .upstream_fixes import Finding, detect_fixes, function_source, holds, superseding
from .workflow import DriftOptions, DriftResult, run_drift

__all__ = [
    "STATUSES", "SYMBOL", "Cell", "DriftOptions", "DriftResult", "Finding", "Release", "ReleaseFiles", "cached_file_urls",
    "classify_release", "detect_fixes", "drift", "function_source", "holds", "markdown",
    "needs_attention", "releases", "report_to_github", "run_drift", "superseding", "text_matrix", "write_reports",
]
