"""Whether the operator is logged in to the API server: what its probes report.

kopf's liveness endpoint (``/healthz``) answers 200 for as long as its event loop runs, whatever
the operator can do: a process whose token was revoked, that trusts the wrong CA or cannot reach
the API server would answer 200 for ever while kopf retries its login, and no probe would ever
restart it. kopf's own way to say more is a probe handler (``@kopf.on.probe``): the handlers'
results are the endpoint's body, and a handler that fails makes it answer 500 instead. So:

- both of the operator's clients log in through :meth:`LoginHealth.log_in` -- kopf's (watches,
  status, Events) and the operator's own (children, scaling: :class:`~.kube.Kube`), each of
  which logs in again when the API server answers 401 -- which puts the credentials to the API
  server with one authenticated request and records the outcome: credentials it cannot find,
  an API server that refuses them (401) or cannot be reached, are a failed login;
- :meth:`LoginHealth.probe` fails until the first accepted login, and again whenever the latest
  login failed, so the startup probe restarts an operator that never logs in, and the liveness
  probe one that no longer can (a revoked token, a CA that no longer matches).

An API server that goes away after a login does not fail the probe by itself: the operator
waits for it (its calls retry), and restarting it would not help. It fails the probe once a
login is needed and cannot be made.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from crawlfleet.errors import KubeError

__all__ = ["LOGIN_RETRY_SECONDS", "LoginHealth"]

#: How soon kopf tries a failed login again (its default is a minute): within the chart's
#: startup probe (60 s) several times.
LOGIN_RETRY_SECONDS: Final = 5.0
#: The one request that proves a login: an API server answers it for any authenticated user
#: (system:public-info-viewer) and refuses it (401) for credentials it does not accept.
_PROOF_PATH: Final = "/version"
_PROOF_TIMEOUT_SECONDS: Final = 10.0


def _refusal(info: kopf.ConnectionInfo) -> KubeError | None:
    """Why the API server does not accept ``info``'s credentials (status 0: no answer came);
    None when it does."""
    url = info.server.rstrip("/") + _PROOF_PATH
    request = urllib.request.Request(url, headers=info.as_http_headers())
    try:
        with urllib.request.urlopen(
            request, timeout=_PROOF_TIMEOUT_SECONDS, context=info.as_ssl_context()
        ):
            return None
    except urllib.error.HTTPError as error:
        return KubeError(error.code, "GET", url, str(error.reason))
    except (urllib.error.URLError, OSError) as error:  # refused, reset, TLS, timeout
        return KubeError(0, "GET", url, f"no answer: {error}")


@dataclass
class LoginHealth:
    """The outcome of the operator's latest login to the API server."""

    #: The API server that accepted the latest login; None before the first.
    server: str | None = None
    #: When it did.
    logged_in_at: datetime | None = None
    #: Why the latest login failed; None when it succeeded.
    failure: str | None = "not logged in yet"

    def log_in(
        self, login: Callable[[], kopf.ConnectionInfo]
    ) -> tuple[kopf.ConnectionInfo, KubeError | None]:
        """``login()``'s credentials and why the API server refuses them (None: it accepts
        them), the outcome recorded; what ``login`` raises is recorded and raised.

        Blocking (one HTTP request): both clients call their login in a thread.
        """
        try:
            info = login()
            refusal = _refusal(info)
        except Exception as error:
            self.failure = f"{type(error).__name__}: {error}"
            raise
        if refusal is None:
            self.server, self.logged_in_at, self.failure = info.server, datetime.now(UTC), None
        else:
            self.failure = str(refusal)
        return info, refusal

    async def probe(self, **_: Any) -> dict[str, str]:
        """kopf's probe handler: the login, or a failure kopf's endpoint turns into a 500."""
        if self.failure is not None or self.server is None or self.logged_in_at is None:
            raise kopf.PermanentError(f"not logged in to the API server: {self.failure}")
        return {"server": self.server, "since": self.logged_in_at.isoformat()}
