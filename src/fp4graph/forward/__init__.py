"""Job two: carry the patches forward and upstream.

- :mod:`.sources`: git repositories of an upstream release's source (from its sdist, or a clone);
- :mod:`.rebase`: ``git am`` a series onto a source repository; carry a series to a new version;
- :mod:`.prs`: PR-ready branches, ``git format-patch`` output and PR bodies;
- :mod:`.checks`: upstream's own pre-commit hooks on the files a series touches;
- :mod:`.drift`: every patch against every upstream release.
"""
