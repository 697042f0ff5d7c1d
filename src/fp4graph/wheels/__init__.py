"""Job one: patched wheels and the index.

    fetch (sha256-checked cache) -> trees (unpack + apply the series at zero fuzz)
      -> repack (+fp4graph.N) -> build (wheels/, SHA256SUMS, manifest.json)
      -> index (static PEP 503 pages) -> publish (twine, never overwrites); lint checks patches/.

No torch here.
"""
