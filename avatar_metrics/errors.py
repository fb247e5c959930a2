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


def java_classes(exc: BaseException, most: int = 6) -> list[str]:
    """The Java classes of an error from the JVM (py4j's ``java_exception``) and of its causes,
    outermost first: ``java.lang.OutOfMemoryError`` says what happened where
    ``Py4JJavaError`` does not, and a class name carries no record."""
    names: list[str] = []
    jv = getattr(exc, "java_exception", None)
    try:
        while jv is not None and len(names) < most:
            name = str(jv.getClass().getName())
            if name not in names:
                names.append(name)
            jv = jv.getCause()
    except Exception:  # noqa: BLE001 - a JVM gone, or not a Java object: what was found so far
        pass
    return names


def describe(exc: BaseException) -> str:
    """An exception named by its type, Spark error class and Java classes, without its message."""
    cond = error_class(exc)
    java = java_classes(exc)
    caused = " (" + " <- ".join(java) + ")" if java else ""
    return f"{type(exc).__name__}{f' [{cond}]' if cond else ''}{caused}"
