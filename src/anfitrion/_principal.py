"""The principal: the person or service a session acts for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .exceptions import UserError

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a session acts for. Given to every policy rule and to every tool that asks for it.

    Attributes:
        id: a stable identifier (user name, service account).
        roles: coarse roles, e.g. ``{"support"}``.
        scopes: permissions a tool can require, e.g. ``{"mail:send"}``.
        attributes: anything else a rule or tool needs (tenant, database role, token).
    """

    id: str
    roles: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: Principal | str) -> Principal:
        """Accept a principal or a bare id."""
        if isinstance(value, Principal):
            return value
        if not isinstance(value, str) or not value:
            raise UserError("a principal needs a non-empty id")
        return cls(value)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "roles": sorted(self.roles), "scopes": sorted(self.scopes),
                "attributes": dict(self.attributes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Principal:
        return cls(str(d["id"]), frozenset(d.get("roles", ())), frozenset(d.get("scopes", ())),
                   dict(d.get("attributes", {})))
