"""One exception root, and the tree drawn in ``anfitrion.exceptions`` is the tree defined.

Every module of the package is imported and every exception class it defines is checked: it
derives from :class:`AnfitrionError` and stands in the drawing under its direct base, or it is
one of the few private signals listed below, which never leave their module.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import anfitrion
from anfitrion import exceptions
from anfitrion.exceptions import (
    AnfitrionError,
    ConfigError,
    InputError,
    MissingDependencyError,
    ModelError,
    StoreError,
    UserError,
    map_exceptions,
)

PRIVATE_SIGNALS = {
    "anfitrion.models._strict._NotStrict": "a schema strict mode cannot express; caught there",
    "anfitrion._tools._Cycle": "a $ref cycle found while bounding a schema; caught there",
    "anfitrion._tools._TooDeep": "a schema nested too deeply to bound; caught there",
    "anfitrion._media_structure._Bad": "a file that does not parse as its media type; "
                                       "becomes the summary's reason",
    "anfitrion.policy._cedar._CedarInput": "an argument Cedar cannot represent; becomes a "
                                           "fail-closed deny there",
    "anfitrion.policy._pdp._Failed": "a decision point's failure; becomes its consultation "
                                     "(a fail-closed answer) there",
    "anfitrion.policy._cedar_export._Inexpressible": "a rule Cedar cannot express; becomes "
                                                     "a line of the export's report there",
    "anfitrion.mcp._egress._Refusal": "a request the sandbox's egress proxy refuses; answered "
                                      "with its HTTP status and audited there",
    "anfitrion.integrations.langgraph._Escape": "LangGraph's interrupt carried past the gate's "
                                                "handler: a BaseException on purpose",
}
"""Exception classes outside the tree, each private to its module, with the reason."""

_NODE = re.compile(r"^(?P<lead>[ │├└─]*)(?P<name>[A-Z]\w+)\b(?:.*\[(?P<module>[\w.]+)\])?")


def _modules() -> list[ModuleType]:
    """Every module of the package; skips the test, naming them, when an extra is missing."""
    modules = [anfitrion]
    missing = []
    for info in pkgutil.walk_packages(anfitrion.__path__, "anfitrion.",
                                      onerror=lambda name: missing.append(name)):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # the entry points run a CLI when imported
        try:
            modules.append(importlib.import_module(info.name))
        except MissingDependencyError as exc:
            missing.append(f"{info.name} (extra {exc.extra!r})")
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "anfitrion":
                raise
            missing.append(f"{info.name} ({exc.name} not installed)")
    if missing:
        pytest.skip("the whole tree needs every extra; missing: " + ", ".join(missing))
    return modules


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class a module of the package defines, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == module.__name__):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def _drawn_tree() -> list[tuple[int, str, str]]:
    """(depth, class name, defining module) of each node drawn in the module docstring."""
    doc = exceptions.__doc__ or ""
    drawing = doc.split("::\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    nodes = []
    for line in drawing.splitlines():
        match = _NODE.match(line.removeprefix("    "))
        assert match, f"not a node of the tree: {line!r}"
        module = f"anfitrion.{match['module']}" if match["module"] else "anfitrion.exceptions"
        nodes.append((len(match["lead"]) // 4, match["name"], module))
    return nodes


def test_every_exception_class_of_the_package_derives_from_the_root() -> None:
    outside = {name for name, cls in _exception_classes().items()
               if not issubclass(cls, AnfitrionError)}
    assert outside == set(PRIVATE_SIGNALS)


def test_the_drawn_tree_is_the_tree_of_classes_defined() -> None:
    classes = {name: cls for name, cls in _exception_classes().items()
               if issubclass(cls, AnfitrionError)}
    nodes = _drawn_tree()
    assert nodes[0] == (0, "AnfitrionError", "anfitrion.exceptions")
    drawn: dict[str, type[BaseException]] = {}
    parents: list[type[BaseException]] = []
    for depth, name, module in nodes:
        cls = getattr(importlib.import_module(module), name)
        assert f"{cls.__module__}.{cls.__qualname__}" == f"{module}.{name}", name
        if depth:
            parent = parents[depth - 1]
            assert parent in cls.__bases__, f"{name} is drawn under {parent.__name__}"
        parents[depth:] = [cls]
        drawn[f"{module}.{name}"] = cls
    assert set(drawn) == set(classes)


def test_the_exceptions_module_exports_every_class_it_defines() -> None:
    defined = {name for name, value in vars(exceptions).items()
               if isinstance(value, type) and issubclass(value, BaseException)
               and value.__module__ == "anfitrion.exceptions"}
    assert defined <= set(exceptions.__all__)


def test_the_exceptions_have_one_home_and_the_packages_export_the_same_classes() -> None:
    """The gate, the tools and the MCP toolset no longer re-export exceptions (issue #29)."""
    pytest.importorskip("mcp", reason="the MCP toolset needs the mcp extra")
    import anfitrion.mcp
    from anfitrion import _gate as gate
    from anfitrion import _tools as tools
    from anfitrion.mcp import _toolset as toolset

    assert anfitrion.ToolError is exceptions.ToolError
    assert anfitrion.mcp.McpServerError is exceptions.McpServerError
    for module in (gate, tools, toolset):
        assert not {"ToolError", "ToolNotExecuted", "McpServerError",
                    "ArgumentError"} & set(module.__all__), module.__name__


def test_refused_input_is_still_a_value_error() -> None:
    from anfitrion._json import parse_json_strict
    from anfitrion.exceptions import JsonError

    with pytest.raises(ValueError, match="duplicate key") as caught:
        parse_json_strict('{"a": 1, "a": 2}')
    assert isinstance(caught.value, JsonError)
    assert isinstance(caught.value, InputError)


def test_a_wrong_setting_is_a_user_error_and_still_a_value_error() -> None:
    from anfitrion.policy import RateLimit

    with pytest.raises(ValueError, match="max_calls") as caught:
        RateLimit(("send_*",), max_calls=-1, per=60)
    assert isinstance(caught.value, UserError)


_FOREIGN_ADAPTERS: frozenset[str] = frozenset()  # modules allowed to raise ValueError (none)


def test_the_package_raises_no_bare_value_error() -> None:
    """Every check raises a class of the tree (UserError for settings, InputError for refused
    input), so ``except AnfitrionError`` catches what anfitrion raises."""
    root = Path(anfitrion.__file__).parent
    found = [f"{path.relative_to(root)}:{number}"
             for path in sorted(root.rglob("*.py"))
             if str(path.relative_to(root)) not in _FOREIGN_ADAPTERS
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\braise ValueError\(", line)]
    assert found == []


def test_the_most_specific_mapping_wins_whatever_the_order() -> None:
    for mapping in ({OSError: StoreError, FileNotFoundError: ConfigError},
                    {FileNotFoundError: ConfigError, OSError: StoreError}):
        with pytest.raises(ConfigError), map_exceptions(mapping, "opening"):
            raise FileNotFoundError("no such file")
        with pytest.raises(StoreError), map_exceptions(mapping, "opening"):
            raise PermissionError("denied")


def test_a_mapped_exception_keeps_its_cause_and_the_fields_given() -> None:
    foreign = KeyError("k")
    with pytest.raises(ModelError) as caught, map_exceptions({KeyError: ModelError}, "lookup",
                                                             provider="p", status_code=404):
        raise foreign
    assert caught.value.__cause__ is foreign
    assert (caught.value.provider, caught.value.status_code) == ("p", 404)
    assert str(caught.value) == "lookup: 'k'"


def test_a_translation_function_keeps_what_the_foreign_exception_carries() -> None:
    class Foreign(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(f"failed with {code}")
            self.code = code

    def translate(exc: BaseException, message: str) -> ModelError:
        assert isinstance(exc, Foreign)
        return ModelError(message, provider="p", status_code=exc.code)

    with pytest.raises(ModelError) as caught, map_exceptions({Foreign: translate}, "call"):
        raise Foreign(503)
    assert caught.value.status_code == 503
    assert str(caught.value) == "call: failed with 503"


def test_our_exceptions_and_unmapped_ones_pass_through_untouched() -> None:
    ours = ConfigError("bad key")
    with pytest.raises(ConfigError) as caught, map_exceptions({Exception: StoreError}):
        raise ours
    assert caught.value is ours
    with pytest.raises(KeyError), map_exceptions({OSError: StoreError}):
        raise KeyError("k")
