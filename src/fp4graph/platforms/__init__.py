"""The platforms a stack is built, resolved and installed for (linux x86_64 and linux
aarch64, DGX Spark's), and an emulated aarch64 interpreter to run on an x86_64 machine:
``targets`` (wheel tags, uv's ``--python-platform``), ``emulator`` (qemu-user + Debian's
arm64 python3.11, pinned by sha256)."""
