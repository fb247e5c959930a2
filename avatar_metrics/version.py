"""The package's version (read by pyproject.toml and the report)."""

__version__ = "0.1.0"
