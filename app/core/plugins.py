"""Registries that find their members, and request fields whose words come from one.

A registry package (a statistics mechanism, a query kind) holds one module per member; the
package finds them with ``members`` instead of a hand-kept list, so adding a member is its
module alone. The names a request may use are the registry's (``Registered``): validated
against it when a request arrives and listed as an OpenAPI enum, read when asked, so they can
never drift from what the registry serves. A response field may likewise hold one of the
models a registry lists (``RegisteredModels``: a job's stored result, whichever kind made it).
"""

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

T = TypeVar("T")


def modules(package: ModuleType, *, skip: Sequence[str] = ("base",)) -> list[ModuleType]:
    """Each of ``package``'s modules but those named in ``skip``, imported once, in the order of
    their names (a module that registers itself as it is imported registers in that order)."""
    found = sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in found if info.name not in skip]


def members(package: ModuleType, kind: type[T], *, skip: Sequence[str] = ("base",)) -> list[T]:
    """Every module-level instance of ``kind`` in ``package``'s modules (each imported once, by
    name), sorted by its class's ``order`` and then its ``name``: the order the API lists them.

    Raises:
        ValueError: two members share a name (a registry serves one member per name).
    """
    found: dict[int, T] = {}
    for module in modules(package, skip=skip):
        found.update({id(v): v for v in vars(module).values() if isinstance(v, kind)})
    ordered = sorted(found.values(), key=lambda m: (getattr(m, "order", 0), _name(m)))
    names = [_name(m) for m in ordered]
    if len(set(names)) != len(names):
        raise ValueError(f"{package.__name__}: two members share a name in {names}")
    return ordered


def _name(member: object) -> str:
    """A member's name (a mechanism's ``name``, a query kind's ``kind``)."""
    return str(getattr(member, "name", None) or getattr(member, "kind", ""))


def _expected(names: Sequence[str]) -> str:
    """The allowed words as pydantic's enum error lists them: 'a', 'b' or 'c'."""
    quoted = [repr(str(n)) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class Registered:
    """``Annotated[str, Registered("QueryKind")]``: a word its registry lists, refused otherwise
    with pydantic's own enum error (type ``enum``, the allowed words in its message), and an
    OpenAPI component ``title`` with the enum.

    The schema module declares the field; the registry package, which imports the schema module,
    hands over its names (``provide``), read at each validation and each schema build, so the
    arrow points one way (schema <- registry) and a member added to the registry is accepted.
    """

    def __init__(self, title: str, description: str | None = None) -> None:
        self.title, self.description = title, description
        self._names: Callable[[], Sequence[str]] | None = None

    def provide(self, names: Callable[[], Sequence[str]]) -> None:
        """Take the registry's names, as ``names()`` gives them (in the order the API lists)."""
        self._names = names

    def names(self) -> Sequence[str]:
        """The registered words.

        Raises:
            LookupError: no registry has provided them (its package is not imported).
        """
        if self._names is None:
            raise LookupError(f"no registry provides {self.title}'s names: import its package")
        return self._names()

    def _check(self, value: Any) -> str:
        names = self.names()
        if isinstance(value, str) and value in names:
            return value
        raise PydanticCustomError("enum", "Input should be {expected}",
                                  {"expected": _expected(names)})

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self._check, ref=f"{__name__}.{self.title}",
            json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.to_string_ser_schema())

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        reference = handler(schema)
        definition = handler.resolve_ref_schema(reference)
        definition.clear()
        if self.description:
            definition["description"] = self.description
        definition.update(enum=list(self.names()), title=self.title, type="string")
        return reference


class RegisteredModels:
    """``Annotated[Any, RegisteredModels("a job's stored result")]``: a value one of the models a
    registry lists validates (the first that takes it, in the registry's order), served as that
    model; OpenAPI shows ``anyOf`` their components (and ``null`` where ``nullable``). The
    annotated type is ``Any``: FastAPI would list a model class named there (a base class of
    the registered ones) as a component of its own.

    As with ``Registered``, the registry package hands over its models (``provide``) and they
    are read at each validation and each schema build, so a model the registry gains is served.
    """

    def __init__(self, what: str, *, nullable: bool = True) -> None:
        self.what, self.nullable = what, nullable
        self._models: Callable[[], Sequence[type[BaseModel]]] | None = None

    def provide(self, models: Callable[[], Sequence[type[BaseModel]]]) -> None:
        """Take the registry's models, as ``models()`` gives them (in the order to try them)."""
        self._models = models

    def models(self) -> Sequence[type[BaseModel]]:
        """The registered models.

        Raises:
            LookupError: no registry has provided them (its package is not imported).
        """
        if self._models is None:
            raise LookupError(f"no registry provides the models of {self.what}: import it")
        return self._models()

    def _check(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        models = tuple(self.models())
        if isinstance(value, models):
            return value
        for model in models:
            try:
                return model.model_validate(value)
            except ValidationError:
                continue
        raise PydanticCustomError("registered_model", "Input should be one of {expected}",
                                  {"expected": _expected([m.__name__ for m in models])})

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self._check, serialization=core_schema.simple_ser_schema("any"))

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        union = core_schema.union_schema([m.__pydantic_core_schema__ for m in self.models()])
        return handler(core_schema.nullable_schema(union) if self.nullable else union)
