"""The one exception family the CLI turns into a ``Class: message`` line."""


class Fp4graphError(Exception):
    """Base class: the message names the input at fault and what to do."""


class ConfigError(Fp4graphError):
    """patches/stacks.toml or a series is malformed."""


class HashMismatchError(Fp4graphError):
    """An upstream artifact does not have its pinned sha256."""


class FetchError(Fp4graphError):
    """An upstream artifact could not be found or downloaded."""


class PatchError(Fp4graphError):
    """A patch does not apply at zero fuzz."""


class BuildError(Fp4graphError):
    """A patched wheel could not be produced."""


class PublishError(Fp4graphError):
    """An upload was refused (never overwrite) or failed."""


class SuiteError(Fp4graphError):
    """Upstream's tests could not be fetched, verified, installed or run (verify.suites)."""
