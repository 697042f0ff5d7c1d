"""Checks of the fix: :mod:`.suites` runs upstream's own test suites, patched beside pristine."""
