"""A command's options built from the inputs models it takes (kvstack/cli/flags.py), parsed by typer:
what the user types reaches the model; Pick keeps, renames, re-words and re-defaults flags."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from kvstack.cli.flags import Pick, command
from kvstack.flags import Inputs, flag


class Knobs(Inputs):
    name: Annotated[str, flag("--name", "-n", help="A name.", choices=("a", "b"))] = "a"
    count: Annotated[int | None, flag("--count", help="At least 1.", ge=1)] = None
    loud: Annotated[bool, flag("--loud", help="Say more.")] = False
    tags: Annotated[list[str], flag("--tag", help="Repeatable; none by default.")] = Field(
        default_factory=list
    )


# Module-level, as a command's aliases are: typer resolves the annotations by name.
Picked = Annotated[
    "Knobs",
    Pick(
        without=("loud",), names={"count": ("--times",)}, help={"name": "Which one."}, default={"name": "b"}
    ),
]


class Required(Inputs):
    model: Annotated[str, flag("--model", help="Needed.")]


def _app(fn_register: Any) -> typer.Typer:
    app = typer.Typer()
    fn_register(app)

    @app.command("other")
    def _other() -> None:  # two commands: typer keeps the command names
        pass

    return app


def test_flags_reach_the_model_and_plain_options_stay_typers() -> None:
    got: dict[str, Any] = {}

    def register(app: typer.Typer) -> None:
        @command(app, "go")
        def _cmd(knobs: Knobs, req: Required, verbose: bool = typer.Option(False, "--verbose")) -> None:
            got.update(knobs=knobs, req=req, verbose=verbose)

    result = CliRunner().invoke(_app(register), ["go", "-n", "b", "--count", "3", "--loud", "--model", "m"])
    assert result.exit_code == 0, result.output
    assert got["knobs"] == Knobs(name="b", count=3, loud=True)  # --tag not given: a list's default
    result = CliRunner().invoke(_app(register), ["go", "--tag", "x", "--tag", "y", "--model", "m"])
    assert result.exit_code == 0 and got["knobs"].tags == ["x", "y"]
    assert got["req"].model == "m" and got["verbose"] is False


def test_a_required_flag_is_required_and_a_bad_value_is_the_models_error() -> None:
    def register(app: typer.Typer) -> None:
        @command(app, "go")
        def _cmd(knobs: Knobs, req: Required) -> None:
            pass

    app = _app(register)
    missing = CliRunner().invoke(app, ["go"])
    assert missing.exit_code == 2 and "--model" in missing.output
    from kvstack.errors import InputError

    bad = CliRunner().invoke(app, ["go", "--model", "m", "--count", "0"])
    assert isinstance(bad.exception, InputError) and "--count must be at least 1, not 0" in str(bad.exception)


def test_pick_keeps_renames_rewords_and_redefaults() -> None:
    got: dict[str, Any] = {}

    def register(app: typer.Typer) -> None:
        @command(app, "go")
        def _cmd(knobs: Picked) -> None:
            got["knobs"] = knobs

    app = _app(register)
    assert CliRunner().invoke(app, ["go", "--times", "2"]).exit_code == 0
    assert got["knobs"] == Knobs(name="b", count=2, loud=False)
    assert CliRunner().invoke(app, ["go", "--loud"]).exit_code == 2  # not this command's flag
    renamed = CliRunner().invoke(app, ["go", "--times", "0"])  # the error names the flag as given
    assert str(renamed.exception) == "--times must be at least 1, not 0"
    assert renamed.exception.hint == "e.g. --times 1"  # type: ignore[union-attr]
    shown = CliRunner().invoke(app, ["go", "--help"], env={"COLUMNS": "200"}).output
    assert "Which one." in shown and "--times" in shown and "--count" not in shown


def test_a_pick_of_a_field_the_model_lacks_and_two_groups_with_one_field_fail_at_registration() -> None:
    def bad_pick(app: typer.Typer) -> None:
        @command(app, "go")
        def _cmd(knobs: Annotated[Knobs, Pick(only=("nope",))]) -> None:
            pass

    with pytest.raises(AssertionError, match="no flagged field"):
        _app(bad_pick)

    def clash(app: typer.Typer) -> None:
        @command(app, "go")
        def _cmd(a: Knobs, b: Knobs) -> None:
            pass

    with pytest.raises(AssertionError, match="two options"):
        _app(clash)


@pytest.mark.parametrize("cmd", ["plan", "serve", "export", "validate", "canary", "top"])
def test_every_command_that_reaches_the_remote_store_takes_the_one_remote(cmd: str) -> None:
    from kvstack.cli.app import app
    from kvstack.remote.source import RemoteInputs

    shown = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"}).output
    wording = " ".join(RemoteInputs.flags()["remote"].help.split())
    assert "--remote-file" in shown and wording[:60] in " ".join(shown.split())
