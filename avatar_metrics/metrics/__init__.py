"""One module per metric, each reading like its section of the spec and
declaring all that is known about it (``base.Metric``). ``REGISTRY`` lists them
in the order of the report; everything else reads them from here."""

from . import (attribute_inference, closest, column_direct_match, dcr_share, hidden_rate, knowledge, linkability,
               local_cloaking, membership, row_direct_match)
from .base import Metric

REGISTRY: tuple[Metric, ...] = (
    linkability.METRIC,
    closest.METRIC,
    knowledge.METRIC,
    column_direct_match.METRIC,
    hidden_rate.METRIC,
    local_cloaking.METRIC,
    row_direct_match.METRIC,
    membership.METRIC,
    attribute_inference.METRIC,
    dcr_share.METRIC,
)
BY_KEY = {m.key: m for m in REGISTRY}
KEYS = tuple(BY_KEY)
