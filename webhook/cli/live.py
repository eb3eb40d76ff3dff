"""The CLI's conversation with a live API server (``check --context``, ``doctor``): every
call under one time budget, one progress line when the server is slow, and every way it
fails as one line.

The client library retries a call that times out (urllib3's three retries), so a 30 s
timeout became two minutes of silence against an API server that does not answer; here
retries are off and each call gets what is left of the command's budget. A 403 keeps the API
server's own words (which verb on which resource was refused, for whom). With
``insecure-skip-tls-verify`` urllib3 warns once per request; that becomes one line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from webhook.cluster.kube import REQUEST_TIMEOUT, KubeError, api_client, api_error

if TYPE_CHECKING:
    from webhook.files.snapshot import ClusterFile

T = TypeVar("T")

#: After this many seconds without an answer, one line says what the command waits for.
PROGRESS_AFTER = 3.0


class Live:
    """One command's API server: the client, and what is left of its time budget."""

    def __init__(self, kubeconfig: str | None, context: str | None, *,
                 budget: float = REQUEST_TIMEOUT, progress_after: float = PROGRESS_AFTER
                 ) -> None:
        self.api = api_client(kubeconfig=kubeconfig, context=context, retries=False)
        self.budget = budget
        self.progress_after = progress_after
        self.deadline = time.monotonic() + budget
        self.host = self.api.configuration.host
        self._told = False
        #: urllib3 warns on every unverified request; one line says it instead, once an
        #: answer came (a command that fails says only why it failed)
        self._unverified = not self.api.configuration.verify_ssl
        if self._unverified:
            from urllib3.exceptions import InsecureRequestWarning

            warnings.simplefilter("ignore", InsecureRequestWarning)

    def call(self, what: str, fn: Callable[..., T], *args: Any, optional: bool = False,
             **kwargs: Any) -> T | None:
        """``fn(*args, **kwargs)`` within what is left of the budget. ``optional``: a kind
        the cluster may not serve, or this identity may not read, is None instead of an
        error."""
        from kubernetes.client.exceptions import ApiException

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._timed_out(what)
        timer = threading.Timer(min(self.progress_after, left), self._progress, (what,))
        timer.daemon = True
        timer.start()
        try:
            answer = fn(*args, _request_timeout=left, **kwargs)
        except ApiException as exc:
            if optional and exc.status in (403, 404):
                return None
            raise self._refused(exc, what) from exc
        except Exception as exc:
            if _is_timeout(exc):
                raise self._timed_out(what) from exc
            err = api_error(exc, self.api)
            if err is None:
                raise
            raise err from exc
        finally:
            timer.cancel()
        if self._unverified:
            self._unverified = False
            print(f"warning: the API server's certificate at {self.host} is not verified "
                  "(insecure-skip-tls-verify in the kubeconfig)", file=sys.stderr)
        return answer

    def _progress(self, what: str) -> None:
        if not self._told:
            self._told = True
            print(f"waiting for the API server at {self.host} ({what}; giving up after "
                  f"{self.budget:g} s in all)", file=sys.stderr, flush=True)

    def _timed_out(self, what: str) -> KubeError:
        return KubeError(f"{self.host}: no answer within {self.budget:g} s ({what}); check "
                         "that the API server is reachable from here (--kubeconfig, --context)")

    def _refused(self, exc: Any, what: str) -> KubeError:
        message = _message(exc)
        if exc.status == 403:
            return KubeError(f"{self.host}: 403 forbidden ({what}): {message or exc.reason}; "
                             "grant that permission to the identity of --kubeconfig/--context, "
                             "or use one that has it")
        if exc.status == 401:
            return KubeError(f"{self.host}: 401 not authenticated ({what}); check the "
                             "credentials of --kubeconfig and --context")
        return KubeError(f"{self.host}: {exc.status} {exc.reason} ({what})"
                         + (f": {message}" if message else ""))


def _message(exc: Any) -> str:
    """The Status message the API server sent with an error, if any."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


def _is_timeout(exc: BaseException) -> bool:
    """A call that ran out of time (urllib3 files a refused connection under its timeouts
    too: that one is not)."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        return _is_timeout(exc.reason)
    if isinstance(exc, NewConnectionError):
        return False
    return isinstance(exc, Urllib3Timeout | TimeoutError)


def cluster_objects(live: Live) -> ClusterFile:
    """Nodes, namespace labels, RuntimeClasses and the resources the engine reads, as
    ``kubectl get -o yaml`` would give them: the same inputs a snapshot file gives, so both
    answer alike. Nodes and namespaces are required; the rest is read where this identity
    may (without RuntimeClasses every class is taken to name its handler; without DRA
    objects DRA claims are not judged; without ClusterPolicies and HAMi's DaemonSets
    ``detect`` reads each node's disk alone)."""
    from webhook.cluster.kube import SOURCES
    from webhook.engine import runtime_classes_of
    from webhook.files.snapshot import ClusterFile

    api = live.api
    listed: dict[str, list[dict[str, Any]] | None] = {}
    for src in SOURCES:
        what = f"listing {src.resource}" + (f".{src.group}" if src.group else "")
        found = live.call(what, src.lister(api), optional=not src.required)
        if found is None:
            listed[src.kind] = None
            continue
        raw = found.get("items") if isinstance(found, dict) else found.items
        items = [api.sanitize_for_serialization(i) for i in raw or ()]
        listed[src.kind] = [{**i, "kind": src.kind} for i in items if isinstance(i, dict)]
    namespaces = {meta["name"]: dict(meta.get("labels") or {})
                  for n in listed["Namespace"] or ()
                  if isinstance(meta := n.get("metadata"), dict) and meta.get("name")}
    classes = listed["RuntimeClass"]
    resources = [o for src in SOURCES if src.kind not in ("Node", "Namespace", "RuntimeClass")
                 for o in listed[src.kind] or ()]
    return ClusterFile(listed["Node"] or [], namespaces,
                       runtime_classes_of(classes) if classes is not None else None, resources,
                       server_version(live))


def server_version(live: Live) -> dict[str, Any] | None:
    """The API server's ``/version``, None where it does not say."""
    from webhook.cluster.kube import server_version as read

    return live.call("reading the API server's version", read, live.api, optional=True)
