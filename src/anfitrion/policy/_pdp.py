"""An external decision point as a rule: ``[[pdp]]`` in the policy file.

The policy itself does no I/O. Before a call is decided, the gate has every rule that consults
someone do so (:meth:`~anfitrion.policy.Policy.consult`, as it fetches rate counts): a
:class:`DecisionPointRule` asks its decision point over HTTP, bounded by a timeout, and the
answer lands in :attr:`PolicyContext.external`. At decide the rule turns it into an opinion.

Two wire shapes:

* ``kind = "authzen"`` — the OpenID AuthZEN evaluation API: ``POST`` ``{subject, action,
  resource, context}``, answer ``{"decision": true|false, "context": {...}}``; a ``true``
  decision whose context says ``"anfitrion": "ask"`` asks a person; ``context.reason``
  (a string) gives the words;
* ``kind = "opa"`` — OPA's Data API: ``POST /v1/data/<path>`` with ``{"input": <the same
  document>}``, answer ``{"result": R}`` where R is ``true``/``false``, ``"allow"``/``"ask"``/
  ``"deny"``, or ``{"verdict": …, "reason": …}``.

The document sent: ``subject`` (``{"type": "principal", "id", "properties": {roles, scopes}}``),
``action`` (``{"name": <tool>}``), ``resource`` (``{"type": "server"|"toolkit", "id",
"properties": {"effect"}}``) and ``context`` (the arguments, taint, flagged and unproven
arguments, counters, turn — what a Cedar rule sees).

Fail closed: a decision point that is down, slow (past ``timeout``), answers an error, garbage,
too much, or an unexpected shape gives ``on_error`` (``deny``, the default, or ``ask``) under
``<rule id>.error`` with the reason — never an allow. Its answer is one opinion: a deny from
any other rule still wins (it cannot widen a deny). Each answer and its latency go in the audit
record of the decision (``detail``).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio

from .._home import environment
from .._tools import BoundCall
from ..exceptions import MissingDependencyError, UserError
from ._contract import BaseRule, RuleRole
from ._decision import Decision, PolicyContext, Verdict

__all__ = ["KINDS", "MAX_ANSWER_BYTES", "Consultation", "DecisionPointRule",
           "decision_document"]

KINDS = ("authzen", "opa")
MAX_ANSWER_BYTES = 64 * 1024
"""A longer answer is garbage: the decision point failed."""
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True, slots=True)
class Consultation:
    """What a decision point answered for one call (or why it did not), and how long it took.

    Attributes:
        call_id: the call it was asked about (a consultation never decides another call).
        verdict / reason: its answer; ``None`` when it failed.
        error: why it failed (down, slow, garbage, wrong shape).
        latency_ms: from request to answer or failure.
        answer: the answer's text as received, cut (for the audit).
    """

    call_id: str
    verdict: Verdict | None
    reason: str | None
    error: str | None
    latency_ms: float
    answer: str = ""

    def summary(self, rule_id: str) -> dict[str, Any]:
        return {"rule": rule_id, "latency_ms": round(self.latency_ms, 2),
                "verdict": None if self.verdict is None else self.verdict.value,
                "error": self.error, "answer": self.answer[:300]}


def decision_document(call: BoundCall, context: PolicyContext) -> dict[str, Any]:
    """The AuthZEN-shaped description of one call (module docstring)."""
    from ._cedar import cedar_request, cedar_resource  # the same facts a Cedar rule sees

    request = cedar_request(call, context, plain=True)
    resource = cedar_resource(call.tool)
    principal = context.principal
    return {
        "subject": {"type": "principal", "id": principal.id,
                    "properties": {"roles": sorted(principal.roles),
                                   "scopes": sorted(principal.scopes)}},
        "action": {"name": call.tool.name},
        "resource": {"type": resource["type"].lower(), "id": resource["id"],
                     "properties": {"effect": call.tool.effect.value}},
        "context": request["context"],
    }


class _Failed(Exception):
    """The decision point did not give a usable answer (private: becomes a consultation)."""


class DecisionPointRule(BaseRule):
    """Asks an external decision point (AuthZEN or OPA) about calls (module docstring).

    Args:
        url: where to ask: ``https://…`` (``http://`` only to a loopback address); for OPA the
            full Data API URL (``http://127.0.0.1:8181/v1/data/anfitrion/tools/verdict``).
        kind: ``"authzen"`` or ``"opa"``.
        timeout: seconds before the decision point counts as down.
        on_error: ``"deny"`` or ``"ask"`` when it fails; never allow.
        tools: tool-name globs it is asked about (default every tool).
        token_env: the environment variable holding a bearer token for it (never the token
            itself; an unset variable is a failure).
        rule_id: the id its decisions are reported under.
    """

    role = RuleRole.OPINION

    def __init__(self, url: str, *, kind: str = "authzen", timeout: float = 1.0,
                 on_error: str = "deny", tools: Iterable[str] = ("*",),
                 token_env: str | None = None, rule_id: str = "pdp") -> None:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise UserError("no credentials in a decision point URL: name the variable "
                             "holding its token in token_env")
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise UserError(f"a decision point URL must be https://host/…, not {url!r}")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise UserError("a decision point over plain http must be on a loopback "
                             "address; use https")
        if kind not in KINDS:
            raise UserError(f"kind must be one of {', '.join(map(repr, KINDS))}")
        if kind == "opa" and "/v1/data/" not in parts.path:
            raise UserError("an OPA URL names its Data API document: …/v1/data/<path>")
        if not 0 < timeout <= 30:
            raise UserError("timeout must be more than 0 and at most 30 seconds")
        if on_error not in ("deny", "ask"):
            raise UserError("on_error must be 'deny' or 'ask' (a failure never allows)")
        self.url, self.kind, self.timeout = url, kind, float(timeout)
        self.token_env = token_env  # the variable's name; the token is read per request
        self.on_error = Verdict(on_error)
        self.tools = tuple(tools)
        if not self.tools or not all(isinstance(t, str) and t for t in self.tools):
            raise UserError("tools must be non-empty name patterns")
        if importlib.util.find_spec("httpx") is None:  # refuse to load, not fail each call
            raise MissingDependencyError("http", "httpx")
        self.rule_id = rule_id
        self.settings = {"url": url, "kind": kind, "timeout": self.timeout,
                         "on_error": on_error, "tools": list(self.tools),
                         "token_env": token_env}
        self.trade_off = "every call it covers waits for the decision point (up to timeout)"
        self._tls: Any = None  # one TLS context for every request (building one costs ms)

    def covers(self, tool_name: str) -> bool:
        return any(fnmatch.fnmatchcase(tool_name, t) for t in self.tools)

    async def consult(self, call: BoundCall, context: PolicyContext) -> Consultation | None:
        """Ask the decision point about *call*; never raises (a failure is a consultation)."""
        if not self.covers(call.tool.name):
            return None
        started = time.perf_counter()
        answer = ""
        try:
            body = decision_document(call, context)
            payload = {"input": body} if self.kind == "opa" else body
            with anyio.fail_after(self.timeout):  # the whole exchange: a drip is slow too
                answer = await self._post(payload)
            verdict, reason = self._read(answer)
            error = None
        except _Failed as exc:
            verdict, reason, error = None, None, str(exc)
        except TimeoutError:
            verdict, reason, error = None, None, f"no answer within {self.timeout:g} s"
        except ValueError as exc:  # an argument the document cannot carry
            verdict, reason, error = None, None, f"the call cannot be described: {exc}"
        return Consultation(call.call_id, verdict, reason, error,
                            (time.perf_counter() - started) * 1000, answer[:2000])

    async def _post(self, payload: Mapping[str, Any]) -> str:
        try:
            import httpx
        except ImportError:  # pragma: no cover - the http extra
            raise MissingDependencyError("http", "httpx") from None
        try:
            if self._tls is None:
                import ssl

                self._tls = ssl.create_default_context()
            headers = {"accept": "application/json"}
            if self.token_env is not None:
                token = environment().get(self.token_env, "")
                if not token:
                    raise _Failed(f"the token variable {self.token_env} is unset")
                headers["authorization"] = f"Bearer {token}"
            async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False,
                                         trust_env=False, verify=self._tls) as client, \
                    client.stream("POST", self.url, json=payload,
                                  headers=headers) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise _Failed(f"the answer is longer than {MAX_ANSWER_BYTES} bytes")
                    chunks.append(chunk)
                if response.status_code != 200:
                    raise _Failed(f"the decision point answered HTTP {response.status_code}")
                return b"".join(chunks).decode("utf-8", "replace")
        except httpx.TimeoutException:
            raise _Failed(f"no answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise _Failed(f"the decision point cannot be reached ({type(exc).__name__})"
                          ) from None

    def _read(self, text: str) -> tuple[Verdict, str | None]:
        try:
            answer = json.loads(text)
        except ValueError:
            raise _Failed("the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise _Failed("the answer is not a JSON object")
        return _authzen(answer) if self.kind == "authzen" else _opa(answer)

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        if not self.covers(call.tool.name):
            return None
        found = context.external.get(self.rule_id)
        if not isinstance(found, Consultation) or found.call_id != call.call_id:
            return self._failed("the decision point was not consulted about this call")
        if found.verdict is None:
            return self._failed(found.error or "no answer")
        reason = found.reason or {Verdict.ALLOW: "the decision point allows it",
                                  Verdict.ASK: "the decision point asks a person",
                                  Verdict.DENY: "the decision point refuses it"}[found.verdict]
        return Decision(found.verdict, reason, self.rule_id)

    def _failed(self, why: str) -> Decision:
        reason = f"the decision point failed: {why}"
        return Decision(self.on_error, reason, f"{self.rule_id}.error")


def _words(value: Any) -> str | None:
    """A decision point's reason, on one visible line (it reaches the model, the audit log and
    a terminal): control and format characters dropped, cut."""
    if not isinstance(value, str):
        return None
    visible = "".join(c if c.isprintable() else " " for c in value[:300]).strip()
    return visible or None


def _authzen(answer: Mapping[str, Any]) -> tuple[Verdict, str | None]:
    decision = answer.get("decision")
    if not isinstance(decision, bool):
        raise _Failed("an AuthZEN answer needs a boolean 'decision'")
    context = answer.get("context")
    context = context if isinstance(context, dict) else {}
    if not decision:
        return Verdict.DENY, _words(context.get("reason"))
    ask = context.get("anfitrion") == "ask"
    return (Verdict.ASK if ask else Verdict.ALLOW), _words(context.get("reason"))


def _opa(answer: Mapping[str, Any]) -> tuple[Verdict, str | None]:
    if "result" not in answer:  # OPA's answer for an undefined document
        raise _Failed("OPA's document is undefined for this input (no 'result')")
    result = answer["result"]
    if isinstance(result, bool):
        return (Verdict.ALLOW if result else Verdict.DENY), None
    if isinstance(result, str) and result in ("allow", "ask", "deny"):
        return Verdict(result), None
    if isinstance(result, dict) and result.get("verdict") in ("allow", "ask", "deny"):
        return Verdict(result["verdict"]), _words(result.get("reason"))
    raise _Failed("OPA's result is not true/false, 'allow'/'ask'/'deny' or "
                  "{verdict, reason}")
