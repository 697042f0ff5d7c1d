"""What fp4graph knows, shared by every job: errors, logging, atomic files, settings, the
pinned stacks (patches/stacks.toml), patch series, and the upstream projects it patches.

The lowest layer: it imports nothing else of fp4graph.
"""
