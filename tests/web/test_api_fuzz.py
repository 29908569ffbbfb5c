"""Fuzz the JSON API from its own OpenAPI document: no input makes it fail with a 5xx."""

from __future__ import annotations

import itertools

import anyio
import schemathesis
from hypothesis import HealthCheck, settings
from starlette.types import Receive, Scope, Send

from anfitrion._approvals import ApprovalRequest
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

from .inbox_support import TOKEN

store = MemoryStore()
KNOWN = [ApprovalRequest.for_call(
    session_id=f"s{i}", principal_id="alice", call_id=f"c{i}", tool_name="send_email",
    tool_definition_hash="h", arguments={"to": "bob\u202e@example.com", "n": i}, effect="write",
    reason="writes need a person", rule_id="default.write") for i in range(3)]
for known in KNOWN:
    anyio.run(store.create_approval, known)
inbox = create_app(store, token=TOKEN, allowed_hosts=["localhost", "testserver", "127.0.0.1"])
_requests = itertools.count()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The inbox, each request from its own address: schemathesis's probes with a wrong token
    (it expects 401) are not a guessing attack; the throttle has its own tests
    (tests/security/test_bearer_token_guesses_are_throttled.py)."""
    if scope["type"] == "http":
        n = next(_requests)
        scope = {**scope, "client": (f"10.{n // 62500 % 250}.{n // 250 % 250}.{n % 250}", 1)}
    await inbox(scope, receive, send)


schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)


@schema.auth()
class BearerToken:
    """The configured token; schemathesis also probes each operation without it (expects 401)."""

    def get(self, case: schemathesis.Case, context: object) -> str:
        return TOKEN

    def set(self, case: schemathesis.Case, data: str, context: object) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_fails_with_a_server_error(case: schemathesis.Case) -> None:
    if case.path_parameters and "request_id" in case.path_parameters:
        # half the cases aim at a request that exists, so that the answer paths are reached
        generated = str(case.path_parameters["request_id"])
        if len(generated) % 2 == 0:
            case.path_parameters["request_id"] = KNOWN[len(generated) % 3].id
    case.call_and_validate()
