"""Errors that the command line turns into exit code 2 (bad configuration or input).

Messages name the key, table, column or file and say what to do. They never
carry record values: the data is personal.
"""


class AvatarMetricsError(Exception):
    """Base class of the errors the user can fix."""


class ConfigError(AvatarMetricsError):
    """The configuration is malformed: unknown key, wrong type, missing value."""


class InputError(AvatarMetricsError):
    """An input table is unreadable or does not fit the configuration."""
