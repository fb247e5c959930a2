"""avatar-metrics: distributed privacy metrics for synthetic data ("avatars").

Library use::

    from avatar_metrics import evaluate
    report = evaluate(spark, originals_df, avatars_df, holdout_df, config={"known_variables": [...]})
    report.to_dict()
"""

from .version import __version__
from .api import evaluate  # noqa: E402
from .config import Config  # noqa: E402
from .configure import load_config  # noqa: E402
from .errors import AvatarMetricsError, ConfigError, InputError  # noqa: E402
from .report import MetricResult, Report  # noqa: E402

__all__ = [
    "evaluate",
    "Config",
    "load_config",
    "Report",
    "MetricResult",
    "AvatarMetricsError",
    "ConfigError",
    "InputError",
    "__version__",
]
