"""The inbox's effects pages: side effects by key, and a person resolving an unknown one.

``GET /effects`` lists the unsettled effects (``?show=all``: every one), ``GET /effects/{key}``
shows one — its arguments redacted as the audit log redacts them — and ``POST
/effects/{key}/resolve`` (signed in, CSRF token, same origin: the approval pages' rules)
settles it through :func:`anfitrion._resolutions.resolve`, the path the CLI and the JSON API
take, audited as ``web:<name>``. The form carries the call the person saw holding the effect:
if the key has moved to another call since, the resolution is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .. import _resolutions as resolutions
from ..exceptions import ConflictError
from ..store import EffectEntry, ResolutionStore
from . import _pages as pages
from ._security import SignedIn
from ._signin import SignIn, to_login

__all__ = ["EffectPages"]

_KEY = re.compile(r"[0-9a-f]{64}")
_STATE_CLASS = {"unknown": "pending", "running": "pending", "done": "approved",
                "resolved_done": "approved", "failed": "denied", "resolved_failed": "denied"}
"""The inbox stylesheet's state colours, by effect state."""


def _state_class(entry: EffectEntry) -> str:
    return _STATE_CLASS.get(resolutions.effect_state_name(entry), "edited")


def _arguments(entry: EffectEntry) -> list[tuple[str, str]] | None:
    preview = resolutions.arguments_preview(entry)
    if preview is None:
        return None
    return [(name, str(value)) for name, value in preview.items()]


def effects_page(effects: list[EffectEntry], *, show_all: bool, csrf: str, user: str) -> str:
    return pages._render("effects.html", "Effects", csrf=csrf, user=user, section="effects",
                         effects=effects, show_all=show_all, state_name=resolutions.
                         effect_state_name, state_class=_state_class)


def effect_page(entry: EffectEntry, *, csrf: str, user: str) -> str:
    return pages._render("effect.html", f"Effect {entry.display}", csrf=csrf, user=user,
                         section="effects", e=entry, arguments=_arguments(entry),
                         state_name=resolutions.effect_state_name, state_class=_state_class)


@dataclass
class EffectPages:
    """The effects pages over *store*, with the inbox's sign-in and CSRF checks (*sign_in*)."""

    store: ResolutionStore
    sign_in: SignIn

    def routes(self) -> list[Route]:
        return [
            Route("/effects", self.listing, methods=["GET"]),
            Route("/effects/{key}", self.detail, methods=["GET"]),
            Route("/effects/{key}/resolve", self.resolve, methods=["POST"]),
        ]

    async def _found(self, key: str) -> EffectEntry | None:
        return await self.store.effect_state(key) if _KEY.fullmatch(key) else None

    async def listing(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        show_all = request.query_params.get("show") == "all"
        effects = list(await self.store.list_effects(unsettled_only=not show_all))
        return HTMLResponse(effects_page(effects, show_all=show_all, csrf=who.csrf,
                                         user=who.name))

    async def detail(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        entry = await self._found(request.path_params["key"])
        if entry is None:
            return _message(who, "Not found", "no such effect", 404, "/effects")
        return HTMLResponse(effect_page(entry, csrf=who.csrf, user=who.name))

    async def resolve(self, request: Request) -> Response:
        checked = await self.sign_in.checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, form = checked
        key = request.path_params["key"]
        back = f"/effects/{key}" if _KEY.fullmatch(key) else "/effects"
        outcome = form.get("outcome")
        if outcome not in ("done", "failed"):
            return _message(who, "Refused", "say what happened: it happened, or it did not",
                            422, back)
        entry = await self._found(key)
        if entry is None:
            return _message(who, "Not found", "no such effect", 404, "/effects")
        if form.get("call_id") != entry.call_id:
            return _message(who, "Refused", "this effect is held by another call than the one "
                            "you saw: look at it again", 409, back)
        note = form.get("note", "").strip()
        try:
            await resolutions.resolve(self.store, entry.key, done=outcome == "done",
                                      by=f"web:{who.name}", note=note, via="web")
        except ConflictError as exc:
            return _message(who, "Refused", str(exc), 409, back)
        return RedirectResponse(back, status_code=303)


def _message(who: SignedIn, title: str, text: str, status: int, back: str) -> Response:
    return HTMLResponse(pages.message_page(title, text, csrf=who.csrf, user=who.name,
                                           back=back), status_code=status)
