"""The JSON API (``/api/v1``): list, show, approve, deny — with the same digest binding as the
page, a bearer token, and an OpenAPI 3.1 document at ``/api/v1/openapi.json``.

The bearer token is the inbox's shared token or a reviewer's own (``reviewers``): only a
reviewer's own token votes on a request that needs several approvers, as that reviewer.
``POST /api/v1/approvals/callback`` takes no bearer token: it takes signed webhook callbacks
(:mod:`anfitrion.channels._webhooks`) and is refused unless callback secrets are configured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import pydantic
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import _resolutions as resolutions
from .._answers import OnAnswer, Outcome, Refusal, answer, notify, state_of, votes_json
from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Reviewer
from .._json import parse_json_strict
from ..channels import Reviewers
from ..channels._webhooks import CallbackVerifier
from ..exceptions import ConflictError, JsonError
from ..store import Store
from ._render import findings
from ._security import SessionBook, token_matches

__all__ = ["Api", "api_routes", "error", "openapi_document"]

PREFIX = "/api/v1"
_STATUS = {Refusal.NOT_FOUND: 404, Refusal.STALE: 409, Refusal.ANSWERED: 409,
           Refusal.EXPIRED: 409, Refusal.INVALID: 422, Refusal.ALREADY_VOTED: 409,
           Refusal.UNQUALIFIED: 403, Refusal.UNIDENTIFIED: 403,
           Refusal.SELF_APPROVAL: 403, Refusal.NOT_ENTITLED: 403}


class ResolutionBody(pydantic.BaseModel):
    """What a client sends to resolve an effect whose outcome is unknown."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    outcome: Literal["done", "failed"] = pydantic.Field(
        description="done: it happened; failed: it did not (it may then run again).")
    note: str = pydantic.Field(default="", max_length=1000)
    by: str = pydantic.Field(default="", max_length=80,
                             description="Who resolves; recorded as api:<by>.")


class DecisionBody(pydantic.BaseModel):
    """What a client sends to approve or deny: the digest it reviewed, a note, its name."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    digest: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$",
                                 description="The request digest the decision is bound to.")
    note: str = pydantic.Field(default="", max_length=2000)
    approver: str = pydantic.Field(default="", max_length=80,
                                   description="Who decides; recorded as api:<approver>.")


class CallbackBody(pydantic.BaseModel):
    """A signed webhook callback: who decided what, bound to the digest they were shown."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    request_id: str = pydantic.Field(min_length=1, max_length=64)
    digest: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$",
                                 description="The request digest the decision is bound to.")
    decision: Literal["approve", "deny"]
    reviewer: str = pydantic.Field(min_length=1, max_length=80,
                                   description="Who decided, as the bridge authenticated them; "
                                               "recorded as webhook:<reviewer>.")
    note: str = pydantic.Field(default="", max_length=2000)


Body = TypeVar("Body", bound=pydantic.BaseModel)


async def _body(request: Request, model: type[Body], raw_body: bytes | None = None
                ) -> Body | Response:
    """The request's JSON body as *model*, parsed strictly; or the error response to send."""
    try:
        raw = (raw_body if raw_body is not None else await request.body()).decode("utf-8")
        return model.model_validate(parse_json_strict(raw or "null"))
    except (UnicodeDecodeError, JsonError) as exc:
        return error(400, f"the body is not valid JSON: {exc}", "invalid_json")
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        return error(422, problems, "invalid_body")


def error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def _authorised(request: Request, token: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(given) and token_matches(given.strip(), token)


def _reviewer(request: Request, reviewers: Reviewers | None) -> Reviewer | None:
    """The reviewer whose own token the request carries, if any."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if reviewers is None or scheme.lower() != "bearer" or not given:
        return None
    return reviewers.by_token(given.strip())


def outcome_response(outcome: Outcome, on_answer: OnAnswer | None) -> JSONResponse:
    """The response to a recorded answer or vote (a refused one is answered by the caller)."""
    request = outcome.request
    body: dict[str, Any] = {"answer": None if outcome.answer is None
                            else outcome.answer.to_dict()}
    if request is not None and request.quorum is not None:
        body["quorum"] = votes_json(request, outcome.votes)
    task = (BackgroundTask(notify, on_answer, request, outcome.answer)
            if on_answer is not None and request is not None and outcome.answer is not None
            else None)
    # a vote that leaves the request waiting for more: accepted, not yet decided
    return JSONResponse(body, status_code=200 if outcome.answer is not None else 202,
                        background=task)


def refusal_response(outcome: Outcome) -> JSONResponse:
    refusal = outcome.refusal or Refusal.INVALID
    message = f"{refusal.value}: {outcome.detail}" if outcome.detail else refusal.value
    return error(_STATUS[refusal], message, refusal.name.lower())


def _unauthorised() -> JSONResponse:
    response = error(401, "send Authorization: Bearer <token>", "unauthorised")
    response.headers["www-authenticate"] = 'Bearer realm="anfitrion"'
    return response


def _answer_json(answer: ApprovalAnswer | None) -> dict[str, Any] | None:
    return None if answer is None else answer.to_dict()


def _approval_json(request: ApprovalRequest, answer: ApprovalAnswer | None, used: bool,
                   now: datetime, *, full: bool,
                   votes: tuple[ApprovalVote, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"request": request.to_dict(),
                           "state": state_of(request, answer, now).value,
                           "answer": _answer_json(answer), "used": used}
    if request.quorum is not None:
        out["quorum"] = votes_json(request, votes)
    if full:
        out["findings"] = findings(request.arguments)
        out["description"] = request.describe()
    return out


def api_routes(store: Store, token: str, on_answer: OnAnswer | None, *,
               reviewers: Reviewers | None = None,
               callbacks: CallbackVerifier | None = None,
               sessions: SessionBook | None = None) -> list[Route]:
    """The ``/api/v1`` routes over *store* (see :class:`Api`)."""
    return Api(store, token, on_answer, reviewers, callbacks, sessions).routes()


@dataclass
class Api:
    """The JSON API over *store*: each route one method.

    Attributes:
        store: where the hosts keep their approval requests and effects.
        token: the inbox's shared bearer token.
        on_answer: awaited after each recorded decision, e.g. to resume the session.
        reviewers: people with their own bearer tokens; only they vote on a quorum.
        callbacks: the signed webhook callbacks' verifier; None: callbacks are refused.
        sessions: the sign-in's book, whose throttle counts wrong bearer tokens too.
    """

    store: Store
    token: str
    on_answer: OnAnswer | None = None
    reviewers: Reviewers | None = None
    callbacks: CallbackVerifier | None = None
    sessions: SessionBook | None = None

    def _refused(self, request: Request) -> JSONResponse:
        """401; a wrong bearer token (not a missing one) counts against its client in the
        inbox's one throttle, shared with the sign-in, which turns it into 429 when over."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if self.sessions is not None and scheme.lower() == "bearer" and given.strip():
            self.sessions.failed()
        return _unauthorised()

    def routes(self) -> list[Route]:
        return [
            Route(f"{PREFIX}/openapi.json", openapi, methods=["GET"]),
            Route(f"{PREFIX}/approvals", self.list_approvals, methods=["GET"]),
            Route(f"{PREFIX}/approvals/callback", self.callback, methods=["POST"]),
            Route(f"{PREFIX}/approvals/{{request_id}}", self.show_approval, methods=["GET"]),
            Route(f"{PREFIX}/approvals/{{request_id}}/approve", self.approve,
                  methods=["POST"]),
            Route(f"{PREFIX}/approvals/{{request_id}}/deny", self.deny, methods=["POST"]),
            Route(f"{PREFIX}/effects", self.list_effects, methods=["GET"]),
            Route(f"{PREFIX}/effects/{{key}}", self.show_effect, methods=["GET"]),
            Route(f"{PREFIX}/effects/{{key}}/resolve", self.resolve_effect, methods=["POST"]),
        ]

    def _allowed(self, request: Request) -> bool:
        return (_authorised(request, self.token)
                or _reviewer(request, self.reviewers) is not None)

    async def _votes_of(self, r: ApprovalRequest) -> tuple[ApprovalVote, ...]:
        return tuple(await self.store.list_approval_votes(r.id)) if r.quorum is not None else ()

    async def list_approvals(self, request: Request) -> Response:
        if not self._allowed(request):
            return self._refused(request)
        status = request.query_params.get("status", "pending")
        if status not in ("pending", "decided", "all"):
            return error(400, "status must be pending, decided or all", "invalid_query")
        session_id = request.query_params.get("session_id")
        now = datetime.now(UTC)
        items = []
        for r in await self.store.list_approvals(pending_only=status == "pending",
                                                 session_id=session_id):
            found = await self.store.get_approval(r.id)
            if found is None:
                continue
            ans, used = found.answer, found.used
            open_now = ans is None and not r.expired(now)
            if (status == "pending" and not open_now) or (status == "decided" and open_now):
                continue
            items.append(_approval_json(r, ans, used, now, full=False,
                                        votes=await self._votes_of(r)))
        return JSONResponse({"approvals": items})

    async def show_approval(self, request: Request) -> Response:
        if not self._allowed(request):
            return self._refused(request)
        found = await self.store.get_approval(request.path_params["request_id"])
        if found is None:
            return error(404, Refusal.NOT_FOUND.value, "not_found")
        return JSONResponse(_approval_json(found.request, found.answer, found.used,
                                           datetime.now(UTC), full=True,
                                           votes=await self._votes_of(found.request)))

    async def approve(self, request: Request) -> Response:
        return await self._decide(request, True)

    async def deny(self, request: Request) -> Response:
        return await self._decide(request, False)

    async def _decide(self, request: Request, approved: bool) -> Response:
        reviewer = _reviewer(request, self.reviewers)
        if reviewer is None and not _authorised(request, self.token):
            return self._refused(request)
        body = await _body(request, DecisionBody)
        if isinstance(body, Response):
            return body
        if reviewer is not None:  # the token says who: a name in the body cannot change it
            approver = f"api:{reviewer.name}"
        else:
            approver = f"api:{body.approver}" if body.approver else "api"
        outcome = await answer(self.store, request.path_params["request_id"], body.digest,
                               approved=approved, approver=approver, note=body.note, via="api",
                               reviewer=reviewer)
        if not outcome.recorded:
            return refusal_response(outcome)
        return outcome_response(outcome, self.on_answer)

    async def callback(self, request: Request) -> Response:
        if self.callbacks is None:
            return error(404, "no webhook callbacks are configured on this server",
                         "not_found")
        raw = await request.body()
        problem = await self.callbacks.check(request.headers, raw)
        if problem is not None:
            return error(401, f"callback refused: {problem}", "bad_signature")
        body = await _body(request, CallbackBody, raw)
        if isinstance(body, Response):
            return body
        # the bridge authenticated the person (its secret speaks for them); their roles are
        # the reviewers file's, never the callback's
        reviewer = self.reviewers.named(body.reviewer) if self.reviewers is not None else None
        outcome = await answer(self.store, body.request_id, body.digest,
                               approved=body.decision == "approve",
                               approver=f"webhook:{body.reviewer}", note=body.note,
                               via="webhook", reviewer=reviewer)
        if not outcome.recorded:
            return refusal_response(outcome)
        return outcome_response(outcome, self.on_answer)

    async def list_effects(self, request: Request) -> Response:
        if not _authorised(request, self.token):
            return self._refused(request)
        status = request.query_params.get("status", "unsettled")
        if status not in ("unsettled", "all"):
            return error(400, "status must be unsettled or all", "invalid_query")
        found = await self.store.list_effects(unsettled_only=status == "unsettled")
        return JSONResponse({"effects": [resolutions.effect_json(e) for e in found]})

    async def show_effect(self, request: Request) -> Response:
        if not _authorised(request, self.token):
            return self._refused(request)
        found = await self.store.effect_state(request.path_params["key"])
        if found is None:
            return error(404, "no such effect", "not_found")
        return JSONResponse(resolutions.effect_json(found))

    async def resolve_effect(self, request: Request) -> Response:
        if not _authorised(request, self.token):
            return self._refused(request)
        body = await _body(request, ResolutionBody)
        if isinstance(body, Response):
            return body
        by = f"api:{body.by}" if body.by else "api"
        try:
            entry = await resolutions.resolve(self.store, request.path_params["key"],
                                              done=body.outcome == "done", by=by,
                                              note=body.note, via="api")
        except ConflictError as exc:
            return error(409, str(exc), "not_unsettled")
        if entry is None:
            return error(404, "no such effect", "not_found")
        return JSONResponse(resolutions.effect_json(entry))


async def openapi(request: Request) -> Response:
    """``GET /api/v1/openapi.json``: :func:`openapi_document`."""
    return JSONResponse(openapi_document())


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Mapping[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _json(_ref("Error"), "Malformed request"),
    "401": _json(_ref("Error"), "Missing or wrong bearer token"),
    "429": {"description": "A wrong bearer token from a client that sent too many (the right "
                           "token is never refused); wait for Retry-After seconds"},
    "404": _json(_ref("Error"), "No such approval request"),
}
_STR = {"type": "string"}
_TIME = {"type": "string", "format": "date-time"}


_REQUEST_ID = {"name": "request_id", "in": "path", "required": True, "schema": _STR}
_EFFECT_KEY = {"name": "key", "in": "path", "required": True, "schema": _STR}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the JSON API."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "anfitrion approval inbox", "version": "1",
                 "description": "Approve or deny the tool calls a host is waiting on. Every "
                                "decision names the digest of the request it answers; a "
                                "request that changed or was decided elsewhere is refused "
                                "with 409."},
        "paths": {**_approval_paths(), **_effect_paths()},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": _schemas()},
        "security": [{"bearer": []}],
    }


def _schemas() -> dict[str, Any]:
    return {"ApprovalRequest": _request_schema(), "ApprovalAnswer": _answer_schema(),
            **_summary_schemas(), "DecisionBody": DecisionBody.model_json_schema(),
            "Effect": _effect_schema(),
            "ResolutionBody": ResolutionBody.model_json_schema(),
            "CallbackBody": CallbackBody.model_json_schema(), "Quorum": _quorum_schema(),
            "DecisionResult": {
                "type": "object", "required": ["answer"],
                "properties": {"answer": {"oneOf": [_ref("ApprovalAnswer"),
                                                    {"type": "null"}]},
                               "quorum": _ref("Quorum")}},
            "Error": {"type": "object", "required": ["error", "message"],
                      "properties": {"error": _STR, "message": _STR}}}


def _request_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["id", "digest", "session_id", "principal_id", "call_id", "tool_name",
                     "tool_definition_hash", "arguments", "effect", "reason", "rule_id",
                     "warnings", "created_at", "expires_at"],
        "properties": {
            "id": _STR, "digest": _STR, "session_id": _STR, "principal_id": _STR,
            "call_id": _STR, "tool_name": _STR, "tool_definition_hash": _STR,
            "arguments": {"type": "object"}, "effect": _STR, "reason": _STR, "rule_id": _STR,
            "warnings": {"type": "array", "items": _STR}, "created_at": _TIME,
            "expires_at": _TIME, "edit_of": {"type": ["string", "null"]},
            "tool_description": {"type": ["string", "null"]},
            "preview": {"enum": ["email"], "description": "the tool declares it sends the "
                        "e-mail its arguments describe"}}}


def _answer_schema() -> dict[str, Any]:
    return {
        "type": "object", "required": ["request_id", "digest", "approved", "approver", "note",
                                       "at"],
        "properties": {"request_id": _STR, "digest": _STR, "approved": {"type": "boolean"},
                       "approver": _STR, "note": _STR, "at": _TIME}}


def _quorum_schema() -> dict[str, Any]:
    return {
        "type": "object", "required": ["required", "roles", "needed", "votes"],
        "description": "Who has voted so far on a request that needs several approvers",
        "properties": {
            "required": {"type": "integer"}, "roles": {"type": "array", "items": _STR},
            "needed": {"type": "integer"},
            "votes": {"type": "array", "items": {
                "type": "object", "required": ["voter", "approved", "via", "roles", "note",
                                               "at"],
                "properties": {"voter": _STR, "approved": {"type": "boolean"}, "via": _STR,
                               "roles": {"type": "array", "items": _STR}, "note": _STR,
                               "at": _TIME}}}}}


def _summary_schemas() -> dict[str, Any]:
    summary = {
        "type": "object", "required": ["request", "state", "answer", "used"],
        "properties": {"request": _ref("ApprovalRequest"),
                       "state": {"enum": ["pending", "approved", "denied", "expired",
                                                  "edited", "withdrawn"]},
                       "answer": {"oneOf": [_ref("ApprovalAnswer"), {"type": "null"}]},
                       "used": {"type": "boolean"}, "quorum": _ref("Quorum")}}
    detail = {"allOf": [_ref("ApprovalSummary"), {
        "type": "object", "required": ["findings", "description"],
        "properties": {"findings": {"type": "array", "items": _STR}, "description": _STR}}]}
    return {"ApprovalSummary": summary, "ApprovalDetail": detail}


def _effect_schema() -> dict[str, Any]:
    nullable = [_STR, {"type": "null"}]
    return {
        "type": "object",
        "required": ["key", "display", "scope", "tool", "session_id", "call_id", "state",
                     "since", "result", "resolved_by", "note", "repeats"],
        "properties": {
            "key": _STR, "display": _STR, "scope": _STR, "tool": _STR,
            "session_id": {"oneOf": nullable}, "call_id": {"oneOf": nullable},
            "state": {"enum": ["unclaimed", "proposed", "decided", "approved", "running",
                               "unknown", "done", "failed", "resolved_done",
                               "resolved_failed"]},
            "since": {"oneOf": [_TIME, {"type": "null"}]}, "result": {"oneOf": nullable},
            "resolved_by": {"oneOf": nullable}, "note": {"oneOf": nullable},
            "repeats": {"type": "integer"},
            "arguments": {"oneOf": [{"type": "object", "additionalProperties": _STR},
                                    {"type": "null"}],
                          "description": "the holding call's arguments, redacted (sensitive "
                                         "and secret-named ones '[sensitive]'); null for an "
                                         "effect reserved before they were kept"}}}


def _decision(verb: str) -> dict[str, Any]:
    return {
        "summary": f"{verb.title()} one request, bound to the digest you reviewed",
        "operationId": f"{verb}Approval", "parameters": [_REQUEST_ID],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("DecisionBody")}}},
        "responses": {
            "200": _json(_ref("DecisionResult"), "The decision was recorded"),
            "202": _json(_ref("DecisionResult"),
                         "The vote was counted; the request needs more approvers"),
            "403": _json(_ref("Error"), "A quorum vote without a reviewer's own token, "
                                        "or without the role"),
            "409": _json(_ref("Error"), "Stale digest, already decided, expired, or "
                                        "this reviewer voted already"),
            "422": _json(_ref("Error"), "The body does not match DecisionBody"),
            **_ERRORS}}


def _approval_paths() -> dict[str, Any]:
    return {
        f"{PREFIX}/approvals": {"get": {
            "summary": "List approval requests, newest first (pending: open and unexpired; "
                       "decided: answered or expired)", "operationId":
            "listApprovals",
            "parameters": [
                {"name": "status", "in": "query", "required": False,
                 "schema": {"enum": ["pending", "decided", "all"], "default": "pending"}},
                {"name": "session_id", "in": "query", "required": False, "schema": _STR}],
            "responses": {"200": _json({"type": "object", "required": ["approvals"],
                                        "properties": {"approvals": {
                                            "type": "array",
                                            "items": _ref("ApprovalSummary")}}},
                                       "The requests"),
                          "400": _ERRORS["400"], "401": _ERRORS["401"],
                          "429": _ERRORS["429"]}}},
        f"{PREFIX}/approvals/{{request_id}}": {"get": {
            "summary": "Show one request with its findings", "operationId": "showApproval",
            "parameters": [_REQUEST_ID],
            "responses": {"200": _json(_ref("ApprovalDetail"), "The request"),
                          **_ERRORS}}},
        f"{PREFIX}/approvals/callback": {"post": {
            "summary": "Answer through a signed webhook callback (Anfitrion-Delivery and "
                       "Anfitrion-Signature headers; see docs/approvals.md)",
            "operationId": "approvalCallback", "security": [],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref("CallbackBody")}}},
            "responses": {
                "200": _json(_ref("DecisionResult"), "The decision was recorded"),
                "202": _json(_ref("DecisionResult"),
                             "The vote was counted; the request needs more approvers"),
                "401": _json(_ref("Error"), "Forged, stale or replayed callback"),
                "403": _json(_ref("Error"), "The reviewer may not vote on this request"),
                "404": _json(_ref("Error"), "No such request, or no callbacks configured"),
                "409": _json(_ref("Error"), "Stale digest, decided, expired, or voted"),
                "422": _json(_ref("Error"), "The body does not match CallbackBody")}}},
        f"{PREFIX}/approvals/{{request_id}}/approve": {"post": _decision("approve")},
        f"{PREFIX}/approvals/{{request_id}}/deny": {"post": _decision("deny")},
    }


def _effect_paths() -> dict[str, Any]:
    return {
        f"{PREFIX}/effects": {"get": {
            "summary": "List side effects by key (unsettled: running or outcome unknown)",
            "operationId": "listEffects",
            "parameters": [{"name": "status", "in": "query", "required": False,
                            "schema": {"enum": ["unsettled", "all"],
                                       "default": "unsettled"}}],
            "responses": {"200": _json({"type": "object", "required": ["effects"],
                                        "properties": {"effects": {
                                            "type": "array", "items": _ref("Effect")}}},
                                       "The effects"),
                          "400": _ERRORS["400"], "401": _ERRORS["401"],
                          "429": _ERRORS["429"]}}},
        f"{PREFIX}/effects/{{key}}": {"get": {
            "summary": "Show one effect", "operationId": "showEffect",
            "parameters": [_EFFECT_KEY],
            "responses": {"200": _json(_ref("Effect"), "The effect"), **_ERRORS}}},
        f"{PREFIX}/effects/{{key}}/resolve": {"post": {
            "summary": "Say what happened to an effect whose outcome is unknown (audited)",
            "operationId": "resolveEffect", "parameters": [_EFFECT_KEY],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref("ResolutionBody")}}},
            "responses": {
                "200": _json(_ref("Effect"), "The resolution was recorded"),
                "409": _json(_ref("Error"), "The effect is not unsettled"),
                "422": _json(_ref("Error"), "The body does not match ResolutionBody"),
                **_ERRORS}}},
    }
