"""Tool definitions: a typed Python function, or explicit JSON Schemas.

::

    @define_tool
    async def read_file(path: str, offset: int | None = None) -> str:
        "Read a text file."
        ...

    echo = define_tool(
        name="echo",
        description="Echo the text back.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]},
        output={"schema": {"type": "string"}, "render": lambda args, value: value},
        execute=lambda args, ctx: args["text"],
    )

Schemas are checked against the supported subset when the definition is built
(:class:`~dsh_jupyter.errors.UnsupportedSchemaError` lists every violation),
so a registered tool can always be validated, rendered and typed in the SDK.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import (
    Any,
    Protocol,
    Required,
    TypeAlias,
    TypedDict,
    cast,
    get_origin,
    get_type_hints,
    overload,
)

import pydantic
from typing_extensions import Unpack

from ..errors import RegistrationError, ToolArgsError, UnsupportedSchemaError
from ..json_dump import dump_json
from ..json_value import JsonObject, JsonValue, NotJsonError, join_path, snapshot_json
from ..runtime import RunFile
from .execution import ToolRunContext
from .policy import FinalizeContent
from .presentation import PresentCall, PresentResult
from .pydantic_schema import subset_from_pydantic
from .results import Content, text_content
from .schema import CompiledSchema, assert_supported_schema, compile_schema

_log = logging.getLogger(__name__)

Render: TypeAlias = Callable[[JsonValue, JsonValue], "Content | str"]
PresentationMeta: TypeAlias = Callable[[JsonValue, JsonValue], JsonValue]
Body: TypeAlias = Callable[[Any, ToolRunContext], Awaitable[Any]]
ArgsParser: TypeAlias = Callable[[JsonObject], Any]
OutputDumper: TypeAlias = Callable[[Any], Any]


class OutputSpec(TypedDict, total=False):
    schema: Mapping[str, Any]
    render: Render
    presentation_meta: PresentationMeta


class ToolOptions(TypedDict, total=False):
    """The options every form of :func:`define_tool` accepts."""

    timeout_ms: float | None
    """Positive and finite; enforced by :func:`~dsh_jupyter.registry.enforce_timeouts`."""
    is_concurrency_safe: Callable[[JsonObject], object] | None
    """``(args) -> True`` lets the call overlap its siblings (anything else: exclusive)."""
    present_call: PresentCall | None
    present_result: PresentResult | None
    finalize_content: FinalizeContent | None


class FunctionToolOptions(ToolOptions, total=False):
    """:func:`define_tool` from a function, and ``@registry.tool(...)``: the
    parameters come from the signature, the output schema from the return annotation."""

    name: str | None
    """Defaults to the function's name."""
    description: str | None
    """Defaults to the function's docstring."""
    output: OutputSpec | ToolOutput | None
    """Overrides ``render``/``presentation_meta`` (or the inferred ``schema``)."""


class SchemaToolOptions(ToolOptions, total=False):
    """:func:`define_tool` from explicit JSON Schemas and an ``execute(args, ctx)`` body."""

    name: Required[str]
    parameters: Required[Mapping[str, Any] | type[pydantic.BaseModel]]
    output: Required[OutputSpec | ToolOutput]
    execute: Required[Callable[[Any, ToolRunContext], Any]]
    description: str
    allow_unsupported_schema: bool
    """Register parameters outside the subset; the tool then validates its own input."""


class OutputCall(Protocol):
    """What an output declaration sees of the call whose value it renders (the pipeline
    passes its :class:`~dsh_jupyter.registry.lifecycle.CallRun`)."""

    @property
    def arguments(self) -> JsonObject:
        """The call's snapshotted arguments."""

    @property
    def attachments(self) -> Sequence[RunFile]:
        """The files the body attached (``ctx.attach``)."""

    @property
    def state(self) -> MutableMapping[object, Any]:
        """Per-call state: what ``render_for`` keeps for ``meta_for`` of the same call."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """The mandatory canonical output declaration: ``render(args, value)`` makes the
    model-facing content, the optional ``presentation_meta(args, value)`` the JSON a card
    keeps of a top-level call.

    The pipeline calls them through :meth:`render_for` and :meth:`meta_for`, which receive
    the call: an output that needs more of it than its arguments (per-call state shared
    between the two, the files the body attached) overrides those, as Code Mode's
    ``run_code`` does. Both may run in a worker thread (large values)."""

    schema: JsonObject
    render: Render
    presentation_meta: PresentationMeta | None = None

    def render_for(self, call: OutputCall, value: JsonValue) -> Content | str:
        """The content of ``call``'s ``value``: ``render(call.arguments, value)``."""
        return self.render(call.arguments, value)

    def meta_for(self, call: OutputCall, value: JsonValue) -> JsonValue:
        """The presentation meta of ``call``'s ``value`` (only when ``presentation_meta``
        is set): ``presentation_meta(call.arguments, value)``."""
        assert self.presentation_meta is not None
        return self.presentation_meta(call.arguments, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSchema:
    """What a model sees of a tool (detached copies)."""

    name: str
    description: str
    parameters: JsonObject

    def to_json(self) -> JsonObject:
        return {"name": self.name, "description": self.description,
                "parameters": snapshot_json(self.parameters, freeze=False)}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ToolDefinition:
    """A registered tool. Build one with :func:`define_tool`."""

    name: str
    description: str
    parameters: JsonObject
    output: ToolOutput
    execute: Body
    validator: CompiledSchema | None  # None: the tool validates its own input
    parse_args: ArgsParser | None = None  # JSON args -> what ``execute`` receives
    dump_output: OutputDumper | None = None  # body return -> JSON value
    timeout_ms: float | None = None
    is_concurrency_safe: Callable[[JsonObject], object] | None = None
    present_call: PresentCall | None = None
    present_result: PresentResult | None = None
    finalize_content: FinalizeContent | None = None
    output_validator: CompiledSchema | None = None

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description,
                          parameters=self.parameters)


def default_render(_args: JsonValue, value: JsonValue) -> Content:
    """Strings raw; any other JSON pretty-printed with a 2-space indent.

    Containers nested 1,000 or more levels deep are written compactly."""
    if isinstance(value, str):
        return text_content(value)
    # The text of json.dumps(value, indent=2, ensure_ascii=False), which failed with a
    # RecursionError before reaching that depth, written in bounded steps (large values
    # are rendered in a worker thread that must hand the GIL back to the loop).
    return text_content(dump_json(value, indent=2, compact_depth=_PRETTY_DEPTH))


_PRETTY_DEPTH = 1000
_DUMP_SLICE = 2_000  # list items per pydantic call: a few milliseconds for plain rows


ToolDecorator: TypeAlias = Callable[[Callable[..., Any]], ToolDefinition]


@overload
def define_tool(fn: Callable[..., Any], /,
                **options: Unpack[FunctionToolOptions]) -> ToolDefinition: ...
@overload
def define_tool(**options: Unpack[SchemaToolOptions]) -> ToolDefinition: ...
@overload
def define_tool(**options: Unpack[FunctionToolOptions]) -> ToolDecorator: ...


def define_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
    output: OutputSpec | ToolOutput | None = None,
    execute: Callable[[Any, ToolRunContext], Any] | None = None,
    allow_unsupported_schema: bool = False,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[JsonObject], object] | None = None,
    present_call: PresentCall | None = None,
    present_result: PresentResult | None = None,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition | ToolDecorator:
    """Build a :class:`ToolDefinition`.

    From a function: ``define_tool(fn)`` or ``@define_tool`` / ``@define_tool(name=...)``
    (the options of :class:`FunctionToolOptions`). Parameters come from the
    signature's type hints (or a single pydantic model parameter); a parameter
    annotated :class:`ToolRunContext` receives the call context instead. The output
    schema comes from the return annotation.

    From schemas: ``define_tool(name=..., parameters={...}, output={"schema": ...,
    "render": ...}, execute=fn)`` where ``execute(args, ctx)`` returns the
    canonical JSON value (the options of :class:`SchemaToolOptions`). ``parameters``
    may also be a pydantic model class.

    Both forms take ``timeout_ms`` (positive, finite), ``is_concurrency_safe(args)``,
    ``present_call(args)``, ``present_result(args, durable)`` and
    ``finalize_content(execution, result)``; ``allow_unsupported_schema=True``
    registers raw parameters outside the subset (the tool then validates its own
    input; SDK types degrade to ``Any``). An unknown keyword is a ``TypeError``.
    """
    common: dict[str, Any] = {
        "timeout_ms": timeout_ms, "is_concurrency_safe": is_concurrency_safe,
        "present_call": present_call, "present_result": present_result,
        "finalize_content": finalize_content}
    if execute is not None:
        if fn is not None:
            raise TypeError("define_tool(fn, execute=...): pass either a function or "
                            "execute= with explicit schemas, not both")
        missing = [key for key, value in (("name", name), ("parameters", parameters),
                                          ("output", output)) if value is None]
        if missing:
            raise TypeError(f"define_tool(execute=...) also needs "
                            f"{', '.join(key + '=' for key in missing)} "
                            "(the schema form takes name, parameters, output and execute)")
        assert name is not None and parameters is not None and output is not None
        return _from_schemas(name=name, execute=execute, parameters=parameters,
                             output=output, description=description or "",
                             allow_unsupported_schema=allow_unsupported_schema, common=common)
    if parameters is not None or allow_unsupported_schema:
        raise TypeError("parameters= and allow_unsupported_schema= belong to the schema form "
                        "define_tool(name=..., parameters=..., output=..., execute=...); "
                        "from a function, the parameters come from its signature")

    def from_function(f: Callable[..., Any]) -> ToolDefinition:
        return _from_function(f, name=name, description=description, output=output,
                              common=common)

    return from_function if fn is None else from_function(fn)


_COMMON = ("timeout_ms", "is_concurrency_safe", "present_call", "present_result",
           "finalize_content")


def _from_schemas(
    *,
    name: str,
    execute: Callable[..., Any],
    parameters: Mapping[str, Any] | type[pydantic.BaseModel],
    output: OutputSpec | ToolOutput,
    description: str,
    allow_unsupported_schema: bool,
    common: Mapping[str, Any],
) -> ToolDefinition:
    _check_common(name, common)
    parse_args: ArgsParser | None = None
    validator: CompiledSchema | None
    if isinstance(parameters, type) and issubclass(parameters, pydantic.BaseModel):
        model = parameters
        params_schema = _subset_from(model.model_json_schema(), name, "parameters")
        parse_args = _pydantic_parser(model.model_validate)
        validator = compile_schema(params_schema)
    else:
        params_schema, validator = _raw_parameters(name, parameters, allow_unsupported_schema)
    body = _as_async_body(execute, name)
    return ToolDefinition(**_with_output_validator(
        name, params_schema, validator, parse_args, body, _output(name, output, None),
        description, None, common))


def _with_output_validator(
    name: str, params: JsonObject, validator: CompiledSchema | None,
    parse_args: ArgsParser | None, body: Body, output: ToolOutput, description: str,
    dump_output: OutputDumper | None, common: Mapping[str, Any],
) -> dict[str, Any]:
    common = dict(common)
    for key in ("present_call", "present_result"):
        if common.get(key) is not None:
            common[key] = _soft_validated(common[key], name, validator, parse_args)
    return dict(
        name=name, description=description, parameters=params, output=output,
        execute=body, validator=validator, parse_args=parse_args, dump_output=dump_output,
        output_validator=compile_schema(output.schema), **common,
    )


def _soft_validated(presenter: Callable[..., Any], name: str, validator: CompiledSchema | None,
                    parse_args: ArgsParser | None) -> Callable[..., Any]:
    """``presenter`` called only with arguments the tool accepts today. A card replayed
    from an older log may carry arguments that no longer validate (a renamed field, a new
    required one): then, or when the presenter itself fails, the result is ``None``, the
    generic view, for every consumer (cards, replays, a custom UI)."""

    @functools.wraps(presenter)
    def present(args: JsonValue, *rest: Any) -> Any:
        if not _valid(args, validator, parse_args):
            return None
        try:
            return presenter(args, *rest)
        except Exception:
            _log.debug("a presenter of %s failed; using the generic view", name,
                       exc_info=True)
            return None

    return present


def _valid(args: JsonValue, validator: CompiledSchema | None,
           parse_args: ArgsParser | None) -> bool:
    if not isinstance(args, dict):
        return False
    if validator is not None and validator.validate(args):
        return False
    if parse_args is not None:
        try:
            parse_args(args)
        except Exception:
            return False
    return True


def _raw_parameters(
    name: str, parameters: Mapping[str, Any], allow_unsupported: bool
) -> tuple[JsonObject, CompiledSchema | None]:
    if not isinstance(parameters, Mapping):
        raise RegistrationError(
            f"tool {name!r}: parameters must be a JSON Schema object (a dict) or a pydantic "
            f"model class, not {type(parameters).__name__}")
    try:
        schema = cast(JsonObject, snapshot_json(dict(parameters)))
    except NotJsonError as exc:
        raise RegistrationError(f"tool {name!r}: parameters schema is not lossless JSON: {exc}",
                                code="UNSUPPORTED_SCHEMA") from None
    if schema.get("type") != "object":
        raise RegistrationError(
            f'tool {name!r}: the parameters schema must describe an object '
            f'({{"type": "object", "properties": {{...}}}}), got type {schema.get("type")!r}',
            code="UNSUPPORTED_SCHEMA")
    try:
        assert_supported_schema(schema, what=f"tool {name!r} parameters schema")
    except UnsupportedSchemaError:
        if allow_unsupported:
            return schema, None
        raise
    return schema, compile_schema(schema)


def _output(name: str, output: OutputSpec | ToolOutput | None,
            inferred: JsonObject | None) -> ToolOutput:
    if isinstance(output, ToolOutput):
        spec: Mapping[str, Any] = {"schema": output.schema, "render": output.render,
                                   "presentation_meta": output.presentation_meta}
    elif output is None:
        spec = {}
    elif isinstance(output, Mapping):
        spec = output
        unknown = set(spec) - {"schema", "render", "presentation_meta"}
        if unknown:
            raise RegistrationError(
                f"tool {name!r}: unknown output keys {sorted(unknown)}; "
                "expected schema, render and optionally presentation_meta")
    else:
        raise RegistrationError(f"tool {name!r}: output must be a dict like "
                                "{'schema': {...}, 'render': fn}")
    schema = spec.get("schema", inferred)
    if schema is None:
        raise RegistrationError(
            f"tool {name!r}: an output declaration is required: pass "
            "output={'schema': {...}, 'render': fn} (or annotate the function's return type)")
    render = spec.get("render")
    if render is None and inferred is None:
        raise RegistrationError(
            f"tool {name!r}: output needs a render function (args, value) -> content; "
            "use dsh_jupyter.default_render for raw strings and pretty JSON")
    try:
        frozen = cast(JsonObject, snapshot_json(dict(schema)))
    except (NotJsonError, TypeError, ValueError) as exc:
        raise RegistrationError(f"tool {name!r}: output schema is not lossless JSON: {exc}",
                                code="UNSUPPORTED_SCHEMA") from None
    assert_supported_schema(frozen, what=f"tool {name!r} output schema")
    meta = spec.get("presentation_meta")
    for label, fn in (("render", render), ("presentation_meta", meta)):
        if fn is not None and not callable(fn):
            raise RegistrationError(f"tool {name!r}: output {label} must be callable")
    return ToolOutput(schema=frozen, render=render or default_render, presentation_meta=meta)


def _check_common(name: object, common: Mapping[str, Any]) -> None:
    if not isinstance(name, str) or not name:
        raise RegistrationError("a tool needs a non-empty string name")
    timeout = common.get("timeout_ms")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float)
        or not math.isfinite(timeout) or timeout <= 0
    ):
        raise RegistrationError(
            f"tool {name!r}: timeout_ms must be a positive, finite number of milliseconds, "
            f"got {timeout!r}")
    for key in _COMMON[1:]:
        if common.get(key) is not None and not callable(common[key]):
            raise RegistrationError(f"tool {name!r}: {key} must be callable")


def _subset_from(json_schema: Mapping[str, Any], name: str, what: str) -> JsonObject:
    try:
        return cast(JsonObject, snapshot_json(subset_from_pydantic(dict(json_schema))))
    except UnsupportedSchemaError as exc:
        raise UnsupportedSchemaError(f"tool {name!r} {what}", exc.violations) from None


def _pydantic_parser(validate: Callable[[Any], Any]) -> ArgsParser:
    def parse(args: JsonObject) -> Any:
        try:
            return validate(args)
        except pydantic.ValidationError as exc:
            violations = [_pydantic_violation(err) for err in exc.errors()]
            raise ToolArgsError("invalid arguments: " + "; ".join(violations),
                                violations) from None
    return parse


def _pydantic_violation(err: Any) -> str:
    path = ""
    for part in err.get("loc", ()):
        path = join_path(path, part)
    return f'"{path}": {err.get("msg", "invalid")}' if path else str(err.get("msg"))


def _as_async_body(fn: Callable[..., Any], name: str) -> Body:
    if not callable(fn):
        raise RegistrationError(f"tool {name!r}: execute must be callable")
    if inspect.iscoroutinefunction(fn):
        return cast(Body, fn)

    async def run_sync(args: Any, ctx: ToolRunContext) -> Any:
        # Synchronous bodies run in a worker thread so they cannot block the loop.
        result = await asyncio.to_thread(fn, args, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    return run_sync


def _from_function(fn: Callable[..., Any], *, name: str | None, description: str | None,
                   output: OutputSpec | ToolOutput | None,
                   common: Mapping[str, Any]) -> ToolDefinition:
    if not callable(fn):
        raise RegistrationError(f"define_tool expects a function, got {type(fn).__name__}")
    name = name or getattr(fn, "__name__", None)
    if description is None:
        description = inspect.cleandoc(fn.__doc__ or "")
    _check_common(name, common)
    assert isinstance(name, str)
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolvable forward references
        raise RegistrationError(f"tool {name!r}: cannot resolve type hints: {exc}") from None
    signature = inspect.signature(fn)
    context_param: str | None = None
    fields: dict[str, Any] = {}
    kinds: dict[str, inspect._ParameterKind] = {}
    for param in signature.parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolRunContext:
            context_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise RegistrationError(f"tool {name!r}: *args/**kwargs cannot become a schema; "
                                    "declare each parameter")
        if param.annotation is inspect.Parameter.empty:
            raise RegistrationError(
                f"tool {name!r}: parameter {param.name!r} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
        kinds[param.name] = param.kind
    single_model = (
        len(fields) == 1
        and isinstance(next(iter(fields.values()))[0], type)
        and issubclass(next(iter(fields.values()))[0], pydantic.BaseModel)
    )
    if single_model:
        model_name = next(iter(fields))
        model: type[pydantic.BaseModel] = next(iter(fields.values()))[0]
    else:
        model = pydantic.create_model(
            f"{name}_args", __config__=pydantic.ConfigDict(arbitrary_types_allowed=False),
            **fields)
    params_schema = _subset_from(model.model_json_schema(), name, "parameters")
    if "return" not in hints:
        raise RegistrationError(
            f"tool {name!r}: add a return annotation (e.g. -> str) so the output schema "
            "can be derived, or use define_tool(name=..., output=..., execute=...)")
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(hints["return"])
    output_schema = _subset_from(adapter.json_schema(mode="serialization"), name, "output")
    out = _output(name, output, output_schema)
    is_async = inspect.iscoroutinefunction(fn)

    async def body(parsed: pydantic.BaseModel, ctx: ToolRunContext) -> Any:
        if single_model:
            kwargs: dict[str, Any] = {model_name: parsed}
        else:
            kwargs = {key: getattr(parsed, key) for key in fields}
        if context_param is not None:
            kwargs[context_param] = ctx
        positional = [kwargs.pop(k) for k in list(kwargs)
                      if kinds.get(k) == inspect.Parameter.POSITIONAL_ONLY]
        if is_async:
            return await fn(*positional, **kwargs)
        return await asyncio.to_thread(fn, *positional, **kwargs)

    by_slices = get_origin(hints["return"]) is list

    def dump(value: Any) -> Any:
        if by_slices and type(value) is list and len(value) > _DUMP_SLICE:
            # One pydantic call holds the GIL for as long as the whole value takes:
            # a long list is dumped a slice at a time (its items are dumped one by one).
            dumped: list[Any] = []
            for start in range(0, len(value), _DUMP_SLICE):
                dumped.extend(adapter.dump_python(value[start:start + _DUMP_SLICE],
                                                  mode="json"))
            return dumped
        return adapter.dump_python(value, mode="json")

    validator = compile_schema(params_schema)
    return ToolDefinition(**_with_output_validator(
        name, params_schema, validator, _pydantic_parser(model.model_validate), body, out,
        description, dump, common))
