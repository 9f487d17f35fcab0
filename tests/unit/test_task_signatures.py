"""Typed tasks without a database: what ``@app.task`` names and registers,
and how a call is checked against the handler's signature before anything
is sent, and a claimed payload again on arrival (docs/tasks.md)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal, Optional, TypedDict

import pytest

import fenceq
from fenceq.signatures import Mismatch, TaskSignature, json_value


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point]


class Options(TypedDict, total=False):
    quality: int


class Required(TypedDict):
    key: str


def handler(ctx, text: str, count: int, ratio: float, flag: bool, maybe: Optional[int], union: int | str,
            items: list[str], table: dict[str, float], shape: Shape, options: Options, required: Required,
            mode: Literal["fast", "slow"], color: Color, anything, nothing: None = None, default: int = 7):
    pass


SIGNATURE = TaskSignature(handler)
GOOD = {"text": "t", "count": 1, "ratio": 2, "flag": False, "maybe": None, "union": "u", "items": ["a"],
        "table": {"k": 1.5}, "shape": Shape("s", [Point(1, 2)]), "options": {}, "required": {"key": "k"},
        "mode": "fast", "color": Color.BLUE, "anything": {"free": [1, None]}}


def payload(**changes: Any) -> dict:
    return SIGNATURE.payload("t", (), {**GOOD, **changes})


def test_a_good_call_becomes_json_and_comes_back_as_the_arguments():
    sent = payload()
    assert sent["shape"] == {"name": "s", "points": [{"x": 1, "y": 2}]} and sent["color"] == "blue"
    assert "default" not in sent  # a default is the worker's to apply
    arguments = SIGNATURE.arguments(sent)
    assert arguments["shape"] == Shape("s", [Point(1, 2)]) and arguments["color"] is Color.BLUE
    assert arguments["ratio"] == 2.0 and isinstance(arguments["ratio"], float)
    assert {key: arguments[key] for key in ("text", "items", "table", "anything")} == \
        {key: GOOD[key] for key in ("text", "items", "table", "anything")}


@pytest.mark.parametrize("changes, message", [
    ({"text": 1}, "parameter text: expected str, got int"),
    ({"count": True}, "parameter count: expected int, got bool"),
    ({"count": 1.5}, "parameter count: expected int, got float"),
    ({"flag": 1}, "parameter flag: expected bool, got int"),
    ({"maybe": "1"}, "parameter maybe: expected int | None, got str"),
    ({"union": None}, "parameter union: expected int | str, got null"),
    ({"items": ["a", 2]}, "parameter items[1]: expected str, got int"),
    ({"items": "abc"}, "parameter items: expected list[str], got str"),
    ({"table": {"k": "v"}}, "parameter table['k']: expected float, got str"),
    ({"shape": Shape("s", [Point("1")])}, "parameter shape.points[0].x: expected int, got str"),
    ({"shape": {"name": "s"}}, "parameter shape: Shape needs field 'points'"),
    ({"options": {"quality": 1, "size": 2}}, "parameter options: Options has no field 'size'"),
    ({"required": {}}, "parameter required: Required needs field 'key'"),
    ({"mode": "medium"}, "parameter mode: expected 'fast' | 'slow', got str"),
    ({"color": "green"}, "parameter color: expected one of Color's values, got str"),
    ({"extra": 1}, "got an unexpected keyword argument 'extra'"),
])
def test_a_bad_call_raises_before_anything_is_sent_naming_the_parameter(changes, message):
    with pytest.raises(fenceq.ConfigError) as raised:
        payload(**changes)
    assert raised.value.sqlstate == "QF100" and raised.value.reason == "invalid_request"
    assert str(raised.value) == f"fenceq: t: {message}"


def test_a_missing_argument_is_named():
    with pytest.raises(fenceq.ConfigError, match="missing a required argument: 'text'"):
        SIGNATURE.payload("t", (), {key: value for key, value in GOOD.items() if key != "text"})


@pytest.mark.parametrize("received, where, message", [
    ({**GOOD, "count": "1"}, "count", "expected int, got str"),
    ({**GOOD, "surprise": 1}, "surprise", "not a parameter of this task"),
    ({key: value for key, value in GOOD.items() if key != "mode"}, "mode", "missing"),
    (["not", "an", "object"], "payload", "expected an object of the task's parameters, got list"),
])
def test_a_payload_that_does_not_fit_is_a_mismatch_on_arrival(received, where, message):
    received = json_value(received)
    with pytest.raises(Mismatch) as raised:
        SIGNATURE.arguments(received)
    assert (raised.value.where, str(raised.value)) == (where, f"{where}: {message}")


def test_keyword_variadics_take_any_other_key():
    def open_handler(ctx, name: str, **rest):
        pass

    signature = TaskSignature(open_handler)
    assert signature.payload("t", ("n",), {"extra": [1]}) == {"name": "n", "extra": [1]}
    assert signature.arguments({"name": "n", "extra": [1]}) == {"name": "n", "extra": [1]}


@pytest.mark.parametrize("annotation", ["set[int]", "dict[int, str]", "complex", "object"])
def test_an_annotation_without_a_json_form_is_refused_at_declaration(annotation):
    namespace: dict[str, Any] = {}
    exec(f"def fn(ctx, value: {annotation}): pass", namespace)
    with pytest.raises(TypeError, match="parameter 'value'"):
        fenceq.App().task(namespace["fn"])


def test_variadic_positionals_are_refused_at_declaration():
    def fn(ctx, *values: int):
        pass

    with pytest.raises(TypeError, match="no \\*args"):
        fenceq.App().task(fn)


def test_pydantic_models_when_pydantic_is_installed():
    pydantic = pytest.importorskip("pydantic")

    class Image(pydantic.BaseModel):
        url: str
        width: int = 256

    def fn(ctx, image: Image, images: list[Image] = []):
        pass

    fn.__annotations__ = {"image": Image, "images": list[Image]}  # the class is local to this test
    signature = TaskSignature(fn)
    assert signature.payload("t", (Image(url="u"),), {}) == {"image": {"url": "u", "width": 256}}
    assert signature.payload("t", ({"url": "u", "width": 3},), {}) == {"image": {"url": "u", "width": 3}}
    assert signature.arguments({"image": {"url": "u"}})["image"] == Image(url="u")
    with pytest.raises(fenceq.ConfigError, match="parameter image.width: Image: "):
        signature.payload("t", ({"url": "u", "width": "wide"},), {})


# Names and registration -----------------------------------------------------------


def test_names_old_spellings_register_as_before():
    app = fenceq.App(queues=["q"])

    @app.task
    def plain(ctx):
        return ctx

    @app.task("named")
    def other(ctx):
        return ctx

    @app.task(queue="q")  # options alone do not rename a plain handler
    def configured(ctx):
        return ctx

    assert app.tasks == {"plain": plain.fn, "named": other.fn, "configured": configured.fn}
    assert plain("ctx") == "ctx" and plain.__name__ == "plain" and not plain.typed


def test_names_typed_handlers_default_to_module_and_function():
    app = fenceq.App(queues=["q"])

    @app.task(aliases=["old.name"])
    def typed(ctx, value: int):
        return value

    @app.task("explicit")
    async def explicit(ctx, value: int):
        return value

    name = f"{__name__}.test_names_typed_handlers_default_to_module_and_function.<locals>.typed"
    assert typed.name == name and set(app.tasks) == {name, "old.name", "explicit"}
    assert app.tasks[name] is app.tasks["old.name"] and app.declared["old.name"] is typed
    assert app.handler("explicit").__name__ == "explicit"
    import inspect
    assert inspect.iscoroutinefunction(app.handler("explicit")) and not inspect.iscoroutinefunction(app.tasks[name])


def test_a_name_registered_twice_is_refused():
    app = fenceq.App()
    app.task("same")(lambda ctx: 1)
    with pytest.raises(ValueError, match="already registered"):
        app.task("same")(lambda ctx: 2)


def test_submit_options_are_checked_before_anything_is_sent():
    app = fenceq.App(url="sqlite:///never-opened.db")

    @app.task
    def typed(ctx, value: int):
        pass

    with pytest.raises(fenceq.ConfigError, match="'retries' is not a submit option"):
        typed.options(retries=3)
    with pytest.raises(fenceq.ConfigError, match="delay or run_at"):
        typed.options(delay=1, run_at=object())
    with pytest.raises(fenceq.ConfigError, match="submission_id names one job"):
        typed.options(submission_id="s").submit_batch([{"value": 1}])
    with pytest.raises(fenceq.ConfigError, match="delay must be a non-negative duration"):
        typed.options(delay=-1).submit(value=1)
    with pytest.raises(fenceq.ConfigError, match="payload as its one argument"):
        app.task("plain")(lambda ctx: None).submit(1, 2)
