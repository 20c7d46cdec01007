"""The cluster backend: kopf handlers that steer each CrawlJob, the manifests of its children,
the CRD generated from the model, and a small Kubernetes client.

Names are imported on first use: the CRD generator and the manifest builders work without
kopf (the ``operator`` extra); the handlers need it.
"""

from typing import TYPE_CHECKING

from crawlfleet._exports import lazy_exports

if TYPE_CHECKING:
    from crawlfleet.operator.backend import KubeBackend
    from crawlfleet.operator.crd import crawljob_crd
    from crawlfleet.operator.handlers import CrawlJobOperator
    from crawlfleet.operator.main import run_operator
    from crawlfleet.operator.metrics import OperatorMetrics

__all__ = ["CrawlJobOperator", "KubeBackend", "OperatorMetrics", "crawljob_crd", "run_operator"]

__getattr__ = lazy_exports(
    __name__,
    {
        "CrawlJobOperator": "crawlfleet.operator.handlers",
        "KubeBackend": "crawlfleet.operator.backend",
        "OperatorMetrics": "crawlfleet.operator.metrics",
        "crawljob_crd": "crawlfleet.operator.crd",
        "run_operator": "crawlfleet.operator.main",
    },
)
