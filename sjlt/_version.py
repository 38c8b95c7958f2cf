"""The package version, defined once: pyproject.toml reads it from here (setuptools dynamic)."""

__version__ = "0.1.0"
