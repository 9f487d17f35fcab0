"""A typed task's parameters as its payload (docs/tasks.md): what a
producer's call may send, checked against the handler's signature and type
hints before anything is sent, and how a worker rebuilds the arguments from
the payload it claimed, checked again (the payload may come from a producer
of another version, or another language).

Each annotation becomes a ``Shape``: ``encode`` checks a Python value and
answers its JSON form (a dataclass becomes a dict), ``decode`` checks a JSON
value and answers the Python value (the dataclass again). An annotation
that has no JSON form is refused when the task is declared.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Mapping as AbstractMapping
from collections.abc import Sequence as AbstractSequence
from typing import Any, Callable, Literal, Union

from .errors import config_error

try:  # pydantic models are accepted when pydantic is installed; it is never required
    import pydantic
except ImportError:  # pragma: no cover - exercised where pydantic is absent
    pydantic = None


class Mismatch(Exception):
    """A value that does not fit its annotation: ``where`` names the
    parameter (and the key or index inside it), the message says what was
    expected and what came (types only: values are never echoed)."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class Shape:
    """How values of one annotation travel as JSON."""

    def __init__(self, name: str, encode: Callable[[Any, str], Any], decode: Callable[[Any, str], Any]):
        self.name = name
        self.encode = encode
        self.decode = decode


def _expecting(name: str, accepts: Callable[[Any], bool], build: Callable[[Any], Any] = lambda value: value) -> Shape:
    """A shape whose JSON form is the value itself (after ``build``)."""

    def check(value: Any, where: str) -> Any:
        if not accepts(value):
            raise Mismatch(where, f"expected {name}, got {type_name(value)}")
        return build(value)

    return Shape(name, check, check)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_SCALARS = {
    str: _expecting("str", lambda value: isinstance(value, str)),
    bool: _expecting("bool", lambda value: isinstance(value, bool)),
    int: _expecting("int", lambda value: isinstance(value, int) and not isinstance(value, bool)),
    float: _expecting("float", _is_number, float),
    type(None): _expecting("None", lambda value: value is None),
}


def _any_json(value: Any, where: str) -> Any:
    """An unannotated value: sent as it is (dataclasses and models as dicts);
    the database checks that it is JSON."""
    return json_value(value)


ANY = Shape("any JSON", _any_json, lambda value, where: value)


def json_value(value: Any) -> Any:
    """A handler's result or an unannotated argument in its JSON form:
    dataclasses and pydantic models become dicts, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: json_value(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, AbstractMapping):
        return {key: json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return value


def shape_of(annotation: Any) -> Shape:
    """The shape of an annotation; ``TypeError`` for one without a JSON form."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return ANY
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return _union([shape_of(argument) for argument in arguments])
    if origin is Literal:
        # By type as well as value: True is not the literal 1.
        return _expecting(" | ".join(map(repr, arguments)),
                          lambda value: any(value == a and type(value) is type(a) for a in arguments))
    if annotation in (list, dict) or origin in (list, dict, AbstractSequence, AbstractMapping):
        return _container(origin or annotation, arguments)
    if isinstance(annotation, type):
        if dataclasses.is_dataclass(annotation):
            return _record(annotation, typing.get_type_hints(annotation),
                           {field.name for field in dataclasses.fields(annotation)
                            if field.default is dataclasses.MISSING
                            and field.default_factory is dataclasses.MISSING},
                           lambda values: annotation(**values))
        if typing.is_typeddict(annotation):
            return _record(annotation, typing.get_type_hints(annotation), set(annotation.__required_keys__),
                           dict)
        if pydantic is not None and issubclass(annotation, pydantic.BaseModel):
            return _model(annotation)
        if issubclass(annotation, enum.Enum):
            return _enum(annotation)
    raise TypeError(f"{annotation!r} has no JSON form (use str, int, float, bool, None, list, dict, "
                    "Optional/Union, Literal, an Enum, a dataclass, a TypedDict or a pydantic model)")


def _union(members: list[Shape]) -> Shape:
    name = " | ".join(member.name for member in members)

    def first_fitting(method: str) -> Callable[[Any, str], Any]:
        def convert(value: Any, where: str) -> Any:
            misses = []
            for member in members:
                try:
                    return getattr(member, method)(value, where)
                except Mismatch as miss:
                    misses.append(miss)
            # A member that got inside the value says better what is wrong (Optional[Size]: size.w).
            deepest = max(misses, key=lambda miss: len(miss.where))
            if len(deepest.where) > len(where):
                raise deepest
            raise Mismatch(where, f"expected {name}, got {type_name(value)}")

        return convert

    return Shape(name, first_fitting("encode"), first_fitting("decode"))


def _container(origin: Any, arguments: tuple) -> Shape:
    if origin in (list, AbstractSequence):
        item = shape_of(arguments[0]) if arguments else ANY
        name = f"list[{item.name}]"

        def each_item(method: str) -> Callable[[Any, str], Any]:
            def convert(value: Any, where: str) -> list:
                if not isinstance(value, (list, tuple)):
                    raise Mismatch(where, f"expected {name}, got {type_name(value)}")
                return [getattr(item, method)(element, f"{where}[{index}]") for index, element in enumerate(value)]

            return convert

        return Shape(name, each_item("encode"), each_item("decode"))
    if arguments and arguments[0] is not str:
        raise TypeError("a dict's keys must be str: JSON objects have string keys")
    item = shape_of(arguments[1]) if arguments else ANY
    name = f"dict[str, {item.name}]"

    def each_value(method: str) -> Callable[[Any, str], Any]:
        def convert(value: Any, where: str) -> dict:
            if not isinstance(value, AbstractMapping) or not all(isinstance(key, str) for key in value):
                raise Mismatch(where, f"expected {name}, got {type_name(value)}")
            return {key: getattr(item, method)(element, f"{where}[{key!r}]") for key, element in value.items()}

        return convert

    return Shape(name, each_value("encode"), each_value("decode"))


def _record(cls: type, hints: dict[str, Any], required: set[str], build: Callable[[dict], Any]) -> Shape:
    """A dataclass or TypedDict: a JSON object with these keys."""
    fields = {key: shape_of(hint) for key, hint in hints.items()}
    name = cls.__name__

    def checked(value: Any, where: str, method: str) -> dict:
        if not isinstance(value, AbstractMapping):
            raise Mismatch(where, f"expected {name} (an object), got {type_name(value)}")
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise Mismatch(where, f"{name} has no field {unknown[0]!r}")
        missing = sorted(required - set(value))
        if missing:
            raise Mismatch(where, f"{name} needs field {missing[0]!r}")
        return {key: getattr(fields[key], method)(item, f"{where}.{key}") for key, item in value.items()}

    def encode(value: Any, where: str) -> dict:
        if dataclasses.is_dataclass(cls) and isinstance(value, cls):
            value = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return checked(value, where, "encode")

    return Shape(name, encode, lambda value, where: build(checked(value, where, "decode")))


def _model(model: Any) -> Shape:
    def validated(value: Any, where: str) -> Any:
        if isinstance(value, model):
            return value
        try:
            return model.model_validate(value)
        except pydantic.ValidationError as error:
            problem = error.errors()[0]
            place = ".".join(str(part) for part in problem.get("loc", ()))
            raise Mismatch(f"{where}.{place}" if place else where,
                           f"{model.__name__}: {problem.get('msg', 'invalid')}") from None

    return Shape(model.__name__, lambda value, where: validated(value, where).model_dump(mode="json"), validated)


def _enum(cls: type[enum.Enum]) -> Shape:
    values = {member.value for member in cls}

    def encode(value: Any, where: str) -> Any:
        if isinstance(value, cls):
            return value.value
        return decode(value, where).value

    def decode(value: Any, where: str) -> enum.Enum:
        if isinstance(value, bool) or value not in values:
            raise Mismatch(where, f"expected one of {cls.__name__}'s values, got {type_name(value)}")
        return cls(value)

    return Shape(cls.__name__, encode, decode)


class TaskSignature:
    """The parameters of a typed handler ``fn(ctx, …)`` after ``ctx``."""

    def __init__(self, fn: Callable[..., Any]):
        parameters = list(inspect.signature(fn).parameters.values())[1:]
        try:
            hints = typing.get_type_hints(fn)
        except Exception as error:  # NameError for a forward reference the module cannot resolve
            raise TypeError(f"the type hints of {fn.__qualname__} cannot be resolved: {error}") from None
        self.shapes: dict[str, Shape] = {}
        self.required: set[str] = set()
        self.open = False  # a **kwargs parameter: other keys pass as any JSON
        for parameter in parameters:
            if parameter.kind is parameter.VAR_KEYWORD:
                self.open = True
            elif parameter.kind in (parameter.VAR_POSITIONAL, parameter.POSITIONAL_ONLY):
                raise TypeError(f"{fn.__qualname__}: parameter {parameter.name!r} cannot be a payload key "
                                "(a task's parameters after ctx are named: no *args, no positional-only)")
            else:
                try:
                    self.shapes[parameter.name] = shape_of(hints.get(parameter.name, inspect.Parameter.empty))
                except TypeError as error:
                    raise TypeError(f"{fn.__qualname__}: parameter {parameter.name!r}: {error}") from None
                if parameter.default is parameter.empty:
                    self.required.add(parameter.name)
        # Binding a call: the handler's signature without ctx.
        self._call = inspect.Signature(parameters)

    def payload(self, task: str, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A producer's call as the payload sent: the arguments given (a
        default is the worker's to apply), checked; QF100 naming the
        parameter for a call that does not fit."""
        try:
            bound = self._call.bind(*args, **kwargs)
        except TypeError as error:
            raise config_error("QF100", f"{task}: {error}") from None
        payload: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if name in self.shapes:
                payload[name] = self._converted(task, self.shapes[name], "encode", value, name)
            else:  # the **kwargs parameter's mapping
                payload.update({key: self._converted(task, ANY, "encode", item, key) for key, item in value.items()})
        return payload

    @staticmethod
    def _converted(task: str, shape: Shape, method: str, value: Any, name: str) -> Any:
        try:
            return getattr(shape, method)(value, name)
        except Mismatch as error:
            raise config_error("QF100", f"{task}: parameter {error}") from None

    def arguments(self, payload: Any) -> dict[str, Any]:
        """The keyword arguments a claimed payload stands for; ``Mismatch``
        when it does not fit (a missing or unknown key, a wrong type)."""
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise Mismatch("payload", f"expected an object of the task's parameters, got {type_name(payload)}")
        missing = sorted(self.required - set(payload))
        if missing:
            raise Mismatch(missing[0], "missing")
        unknown = sorted(set(payload) - set(self.shapes))
        if unknown and not self.open:
            raise Mismatch(unknown[0], "not a parameter of this task")
        return {key: self.shapes[key].decode(value, key) if key in self.shapes else value
                for key, value in payload.items()}
