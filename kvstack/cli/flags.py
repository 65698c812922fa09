"""A command's options built from the inputs models it takes (kvstack/flags.py).

A command function names its inputs as parameters typed by an ``Inputs`` model::

    @command(app, "plan")
    def _cmd(plan: PlanInputs, remote: RemoteInputs, output: PlanOutput) -> None: ...

Each model's flagged fields become the command's options (``Pick`` keeps some, renames, re-words or
re-defaults them for this command); typer parses them as usual, and the function receives the
models, made (and so checked) from what was given. Every option of a command is a model's field;
plain parameters (the engine arguments after ``--``) stay typer's own.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic import ValidationError
from pydantic_core import PydanticUndefined

from kvstack.errors import InputError
from kvstack.flags import Flag, Inputs


@dataclass(frozen=True)
class Pick:
    """Which of a model's flags a command shows, and under what names, help and default
    (``field -> ...``)."""

    only: tuple[str, ...] | None = None
    without: tuple[str, ...] = ()
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)
    default: dict[str, object] = field(default_factory=dict)

    def fields(self, model: type[Inputs]) -> list[str]:
        flags = model.flags()
        names = list(self.only) if self.only is not None else list(flags)
        unknown = [
            n for n in (*names, *self.without, *self.names, *self.help, *self.default) if n not in flags
        ]
        if unknown:
            raise AssertionError(f"{model.__name__} has no flagged field {unknown}")
        return [n for n in names if n not in self.without]


def _typer_type(annotation: Any) -> Any:
    """The type typer parses: a Literal is a string (the model checks its choices)."""
    if get_origin(annotation) is Literal:
        return str
    if get_origin(annotation) in (Union, types.UnionType):
        args = [_typer_type(a) for a in get_args(annotation)]
        return functools.reduce(lambda a, b: a | b, args)
    return annotation


def _group(hint: Any) -> tuple[type[Inputs], Pick] | None:
    """(model, pick) when a parameter's annotation is an inputs model (optionally with a Pick)."""
    pick = Pick()
    if get_origin(hint) is Annotated:
        hint, *extras = get_args(hint)
        pick = next((e for e in extras if isinstance(e, Pick)), pick)
    if isinstance(hint, type) and issubclass(hint, Inputs):
        return hint, pick
    return None


def _option(model: type[Inputs], name: str, f: Flag, pick: Pick) -> inspect.Parameter:
    info = model.model_fields[name]
    names = pick.names.get(name, f.names)
    option = typer.Option(
        *names, help=pick.help.get(name, f.help), show_default=f.show_default, metavar=f.metavar
    )
    default = pick.default.get(name, info.default)
    if default is PydanticUndefined and info.default_factory is not None:
        default = info.default_factory()  # type: ignore[call-arg]
    default = inspect.Parameter.empty if default is PydanticUndefined else default
    annotation = Annotated[_typer_type(info.annotation), option]  # type: ignore[valid-type]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _made(model: type[Inputs], values: dict[str, object], pick: Pick) -> Inputs:
    try:
        return model(**values)
    except ValidationError as exc:  # a value typer let through that the model's type refuses
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        f = model.flags().get(name)
        shown = pick.names.get(name, f.names)[0] if f else name
        raise InputError(f"{shown}: {error['msg']}", hint=f"see: kvstack --help for {shown}") from None
    except InputError as exc:  # the model names its own flags: name them as this command does
        for field, names in pick.names.items():
            own = model.flags()[field].name
            exc.message = exc.message.replace(own, names[0])
            exc.hint = exc.hint.replace(own, names[0]) if exc.hint else exc.hint
        exc.args = (exc.message,)
        raise


def command(
    app: typer.Typer, name: str, **settings: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as ``kvstack NAME``, its inputs models' flags declared as its options."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn, include_extras=True)
        params: list[inspect.Parameter] = []
        groups: dict[str, tuple[type[Inputs], list[str], Pick]] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            group = _group(hints[pname])
            if group is None:
                params.append(param.replace(annotation=hints[pname], kind=inspect.Parameter.KEYWORD_ONLY))
                continue
            model, pick = group
            fields = pick.fields(model)
            groups[pname] = (model, fields, pick)
            params += [_option(model, n, model.flags()[n], pick) for n in fields]
        seen = [p.name for p in params]
        clashes = {n for n in seen if seen.count(n) > 1}
        if clashes:
            raise AssertionError(f"kvstack {name}: two options for the fields {sorted(clashes)}")

        @functools.wraps(fn)
        def run(**kwargs: Any) -> Any:
            for pname, (model, fields, pick) in groups.items():
                kwargs[pname] = _made(model, {n: kwargs.pop(n) for n in fields}, pick)
            return fn(**kwargs)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        del run.__wrapped__  # typer reads the signature above, not fn's
        app.command(name, **settings)(run)
        return run

    return register
