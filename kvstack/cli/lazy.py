"""A command group that imports a command's module only when that command is asked for.

``kvstack --help`` lists every command from a table of names, modules and one-line helps (no
module is imported); ``kvstack CMD ...`` and ``kvstack CMD --help`` import CMD's module alone and
build its command then (its options come from pydantic inputs models: kvstack/cli/flags.py).
The table's helps are the commands' docstrings, which tests/unit/cli/test_startup.py checks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info

Command = Any  # typer's own click Command (typer vendors click: typer._click.Command)


@dataclass(frozen=True)
class LazyCommand:
    """A command by name: the module whose ``register(app)`` declares it, and its help."""

    module: str
    help: str


def build_command(name: str, module: str, *, rich_markup_mode: Any, pretty_exceptions_short: bool) -> Command:
    """Import ``module`` and build the command its ``register`` declares, as typer would in a group."""
    app = typer.Typer()
    importlib.import_module(module).register(app)
    infos = [i for i in app.registered_commands if i.name == name]
    if len(infos) != 1:
        raise AssertionError(f"{module}.register declares no command {name!r}")
    return get_command_from_info(
        infos[0], pretty_exceptions_short=pretty_exceptions_short, rich_markup_mode=rich_markup_mode
    )


class LazyCommands(MutableMapping[str, Command]):
    """The group's commands: built at the first lookup of each; the names alone cost nothing."""

    def __init__(self, table: Mapping[str, LazyCommand], build: Callable[[str, str], Command]) -> None:
        self.table = table
        self.build = build
        self.built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            if name not in self.table:
                raise KeyError(name)
            self.built[name] = self.build(name, self.table[name].module)
        return self.built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("kvstack's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        yield from self.table
        yield from (n for n in self.built if n not in self.table)

    def __len__(self) -> int:
        return len(set(self.table) | set(self.built))


class LazyGroup(TyperGroup):
    """A TyperGroup over ``table`` (set by a subclass): its help lists the table, a command runs built."""

    table: ClassVar[Mapping[str, LazyCommand]] = {}
    pretty_exceptions_short: ClassVar[bool] = True  # typer.Typer's default

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.table, self._build)
        self._listing = False

    def _build(self, name: str, module: str) -> Command:
        return build_command(
            name,
            module,
            rich_markup_mode=self.rich_markup_mode,
            pretty_exceptions_short=self.pretty_exceptions_short,
        )

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Command | None:
        if self._listing and cmd_name in self.table:  # the group's own help: the name and its help
            return TyperCommand(
                name=cmd_name, help=self.table[cmd_name].help, rich_markup_mode=self.rich_markup_mode
            )
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
