"""Flags declared once, on the inputs models that hold them.

A field of an ``Inputs`` model carries its command-line flag as ``Annotated`` metadata (``Flag``: its
names, help text, allowed values and range). The CLI builds each command's options from the models
the command takes (``kvstack/cli/flags.py``), so a flag that several commands share has one name, one
help text, one default and one error wording; the model checks choices and ranges when it is made,
from the command line or from code, with the same one-line errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvstack.errors import InputError
from kvstack.names import choice


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line, and what values it takes."""

    names: tuple[str, ...]  # "--model", "-m"
    help: str
    show_default: bool = True
    metavar: str | None = None
    choices: tuple[str, ...] | None = None  # the allowed values (checked before the type)
    ge: float | None = None  # at least
    gt: float | None = None  # more than (0: positive)
    example: str | None = None  # the value the hint suggests (default: the bound)

    @property
    def name(self) -> str:
        return self.names[0]


def flag(*names: str, help: str, **kw: Any) -> Flag:
    return Flag(names=names, help=help, **kw)


class Inputs(BaseModel):
    """Base of the inputs models: the fields with a ``Flag`` are options of the commands that take
    the model; their choices and ranges are checked here, worded once."""

    model_config = ConfigDict(extra="forbid")
    _flags_cache: ClassVar[dict[type, dict[str, Flag]]] = {}

    @classmethod
    def flags(cls) -> dict[str, Flag]:
        """field name -> its Flag, in declaration order, a ``FlagGroup``'s after the rest (fields with
        no flag are set by code)."""
        if cls not in Inputs._flags_cache:
            grouped = {
                name
                for klass in cls.__mro__
                if issubclass(klass, FlagGroup)
                and FlagGroup in klass.__bases__  # a group, not a model that takes one
                for name in klass.model_fields
            }
            flagged = [
                (name, next(m for m in info.metadata if isinstance(m, Flag)))
                for name, info in cls.model_fields.items()
                if any(isinstance(m, Flag) for m in info.metadata)
            ]
            Inputs._flags_cache[cls] = dict(sorted(flagged, key=lambda item: item[0] in grouped))
        return Inputs._flags_cache[cls]

    @model_validator(mode="before")
    @classmethod
    def _check_choices(cls, data: Any) -> Any:
        """A value outside a flag's choices is named with them, before the type would refuse it."""
        if isinstance(data, dict):
            for name, f in cls.flags().items():
                value = data.get(name)
                if f.choices is not None and isinstance(value, str):
                    choice(value, f.choices, f.name)
        return data

    @model_validator(mode="after")
    def _check_ranges(self) -> Self:
        for name, f in self.flags().items():
            value = getattr(self, name)
            if value is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if f.ge is not None and value < f.ge:
                bound = "0 or more" if f.ge == 0 else f"at least {f.ge:g}"
                raise InputError(
                    f"{f.name} must be {bound}, not {value:g}",
                    hint=f"e.g. {f.name} {f.example or format(f.ge, 'g')}",
                )
            if f.gt is not None and value <= f.gt:
                bound = "positive" if f.gt == 0 else f"more than {f.gt:g}"
                raise InputError(
                    f"{f.name} must be {bound}, not {value:g}", hint=f"e.g. {f.name} {f.example or 1}"
                )
        return self


class FlagGroup(Inputs):
    """Flags that several commands take together, declared once (a command's model inherits the
    group): listed after the command's own."""


# --json, declared once: a command's output as JSON (each command names what it prints with Pick).
Json = Annotated[bool, flag("--json", help="Print the result as JSON."), Field(default=False)]


class JsonInputs(Inputs):
    """--json alone, for a command whose other flags say nothing of its output."""

    as_json: Json


# A load sweep's SLO (bench --sweep, tune --objective capacity): what a request must meet, and the
# share of a step's requests that must meet it for the step to pass.
DEFAULT_SLO_SHARE = 0.9
SloTtft = Annotated[
    float | None,
    flag("--slo-ttft", help="--sweep: a request's TTFT must be at most this", metavar="MS", gt=0,
         example="500", show_default=False),
    Field(default=None),
]  # fmt: skip
SloTpot = Annotated[
    float | None,
    flag("--slo-tpot", help="--sweep: a request's time per output token must be at most this",
         metavar="MS", gt=0, example="50", show_default=False),
    Field(default=None),
]  # fmt: skip
SloShare = Annotated[
    float | None,
    flag(
        "--slo-share",
        help=f"--sweep: the share of a step's requests that must meet the SLO for the step to pass "
        f"(default {DEFAULT_SLO_SHARE}); a layout's capacity is the highest load that passes",
        gt=0,
        example="0.9",
        show_default=False,
    ),
    Field(default=None),
]
# Tokens generated per request (bench's workload; plan --slo-ttft's decode and KV in flight).
OutputTokens = Annotated[int, flag("--output-tokens", help="Tokens generated per request")]


def check_slo_share(share: float | None) -> None:
    """--slo-share is a share: at most 1 (its flag says more than 0)."""
    if share is not None and share > 1:
        raise InputError(f"--slo-share must be at most 1, not {share:g}", hint="e.g. --slo-share 0.9")
