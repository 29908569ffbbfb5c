"""What a tool declares about where harm can happen: its data flow (:class:`Dataflow`).

A tool carries its own (:attr:`anfitrion._tools.Tool.dataflow`); the policy file declares one
for tools the operator does not own (``[tools."<name>"]``, :mod:`anfitrion.policy._declarations`,
which offers this class under its policy path too). Below both the tools and the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SINK_KINDS", "Dataflow"]

SINK_KINDS = ("recipient", "url", "account", "phone", "reference", "channel")
"""The kinds of sink: an e-mail address or user name, a URL or host, an account number or
IBAN, a phone number, a file or object reference (a path, an id), a channel name."""


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise ValueError(f"{what} must be a list of argument names")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name or name.startswith(".") or \
                name.endswith(".") or ".." in name:
            raise ValueError(f"{what}: {name!r} is not an argument name (a dotted path)")
    return names


@dataclass(frozen=True, slots=True)
class Dataflow:
    """Where a tool's arguments and results lead (all optional).

    Attributes:
        sinks: argument path → kind (one of :data:`SINK_KINDS`): the arguments that choose
            who, where or which. Their values must be proven — written by the principal or
            a trusted result, or minted by a service — for the call to run unasked after
            taint.
        outward: argument paths whose text goes to another party (an e-mail's body, a
            message, a page). An unproven e-mail address, URL, account or phone number in it
            asks.
        destructive: argument paths naming what the call deletes, cancels or removes.
        service_ids: result fields (keys of the JSON result, at any depth) whose values a
            trusted system minted: a value found there is proven even in an untrusted result.

    Raises:
        ValueError: a name is empty or not a dotted path, or a sink kind is unknown.
    """

    sinks: Mapping[str, str] = field(default_factory=dict)
    outward: tuple[str, ...] = ()
    destructive: tuple[str, ...] = ()
    service_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.sinks, Mapping):
            raise ValueError("sinks must map argument names to a kind")
        _names(tuple(self.sinks), "sinks")
        for name, kind in self.sinks.items():
            if kind not in SINK_KINDS:
                raise ValueError(f"sink {name!r}: kind must be one of "
                                 f"{', '.join(SINK_KINDS)}, not {kind!r}")
        object.__setattr__(self, "sinks", dict(self.sinks))
        object.__setattr__(self, "outward", _names(self.outward, "outward"))
        object.__setattr__(self, "destructive", _names(self.destructive, "destructive"))
        service = _names(self.service_ids, "service_ids")
        if any("." in s for s in service):
            raise ValueError("service_ids are result field names (no dots)")
        object.__setattr__(self, "service_ids", service)

    @property
    def declared(self) -> bool:
        """Whether the tool says anything about its arguments (service ids alone do not)."""
        return bool(self.sinks or self.outward or self.destructive)

    def to_dict(self) -> dict[str, Any]:
        """The declaration as data (hashed into the tool's definition)."""
        return {"sinks": dict(sorted(self.sinks.items())), "outward": list(self.outward),
                "destructive": list(self.destructive), "service_ids": list(self.service_ids)}

    @classmethod
    def coerce(cls, value: Dataflow | Mapping[str, Any]) -> Dataflow:
        """A :class:`Dataflow` from itself or a mapping of its fields."""
        if isinstance(value, Dataflow):
            return value
        if not isinstance(value, Mapping):
            raise ValueError("dataflow must be a Dataflow or a mapping of its fields")
        unknown = set(value) - {"sinks", "outward", "destructive", "service_ids"}
        if unknown:
            raise ValueError(f"dataflow: unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**value)
