"""Job 4, install a stack as users do: the built index served over HTTP plus PyPI, the
stack's lock (``-c``), ``pip check``, the import smoke of what sglang's server imports at
start (:mod:`.stack`); the locks themselves (:mod:`.lock`: resolve, compare, drift)."""
