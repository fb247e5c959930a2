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


def error_class(exc: BaseException) -> str | None:
    """Spark's error class of an exception (``PATH_NOT_FOUND``, say), or None.

    The class is the one part of a Spark error that is safe to show: the
    message text can quote a record (a malformed CSV row, a value that failed
    a cast), so it is never passed on.
    """
    for attr in ("getCondition", "getErrorClass"):
        fn = getattr(exc, attr, None)
        if callable(fn):
            try:
                cond = fn()
            except Exception:  # noqa: BLE001 - an error that carries no class
                cond = None
            if cond:
                return str(cond)
    return None


def describe(exc: BaseException) -> str:
    """An exception named by its type and Spark error class, without its message."""
    cond = error_class(exc)
    return f"{type(exc).__name__}{f' [{cond}]' if cond else ''}"
