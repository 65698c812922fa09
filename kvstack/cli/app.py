"""The ``kvstack`` entry point and the one place that maps errors to exit codes.

Commands are registered by name (``COMMANDS``): a command's module, with its inputs models and
their pydantic, is imported only when that command runs or its own --help is asked
(kvstack/cli/lazy.py), so ``kvstack --help`` imports typer and rich alone. Command modules import
their core modules lazily too (inside the command function), so that no command's --help, and no
command but where needed, imports torch, vllm, sglang or lmcache.
"""

from __future__ import annotations

import os
import sys

import typer

from kvstack.cli.lazy import LazyCommand, LazyGroup
from kvstack.errors import KvstackError

# Each command: its module (whose register(app) declares it) and its one-line help, its docstring
# as typer shows it (tests/unit/cli/test_startup.py checks that they agree), in --help's order.
COMMANDS: dict[str, LazyCommand] = {
    "doctor": LazyCommand(
        "kvstack.cli.doctor", "Probe GPUs, memory, disks and software, and say what this machine can serve."
    ),
    "plan": LazyCommand(
        "kvstack.cli.plan",
        "Choose the tier layout, sizes and KV dtype for a model on this hardware, and explain why.",
    ),
    "serve": LazyCommand(
        "kvstack.cli.serve",
        "Plan the KV tiers, write the connector config, launch the engine, validate it, keep serving.",
    ),
    "validate": LazyCommand(
        "kvstack.cli.validate",
        "Prove with TTFT and the server's counters that the prefix cache and each tier serve hits.",
    ),
    "canary": LazyCommand(
        "kvstack.cli.canary",
        "Ask planted probes again while the server serves; judge each answer against a recompute.",
    ),
    "bench": LazyCommand(
        "kvstack.cli.bench",
        "Measure TTFT/throughput on cache-heavy workloads and the server's cache hit rate.",
    ),
    "tune": LazyCommand(
        "kvstack.cli.tune",
        "Rank every connector and knob setting on a trace of your traffic, then prove the best by\n"
        "replaying it on your engine within --budget.",
    ),
    "export": LazyCommand(
        "kvstack.cli.export",
        "Write the deployment (Helm, Compose, systemd, KServe, llm-d, LMCache operator) for the plan.",
    ),
    "top": LazyCommand(
        "kvstack.cli.top",
        "Watch servers and their KV tiers live: requests, TTFT, prompt tokens by source, tier hits.",
    ),
}


class KvstackGroup(LazyGroup):
    table = COMMANDS


app = typer.Typer(
    name="kvstack",
    help="Long-context LLM serving with KV-cache offloading that works on the first try.",
    cls=KvstackGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from kvstack.cli.version import version_lines

        typer.echo("\n".join(version_lines()))
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print the versions of kvstack and of the installed engines and connector, and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    pass


def _debug() -> bool:
    return os.environ.get("KVSTACK_DEBUG", "") not in ("", "0", "false")


def _fail(message: str, hint: str | None, code: int) -> int:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (never raises, unless KVSTACK_DEBUG=1)."""
    try:
        result = app(args=argv, prog_name="kvstack", standalone_mode=False)
        return int(result) if isinstance(result, int) else 0
    except KvstackError as exc:
        if _debug():
            raise
        return _fail(exc.message, exc.hint, exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return _fail("interrupted", None, 130)
    except typer.TyperException as exc:  # usage errors: unknown option, bad value, ...
        if _debug():
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            return 2
        ctx = getattr(exc, "ctx", None)
        path = getattr(ctx, "command_path", None) or "kvstack"
        return _fail(exc.format_message(), f"see: {path} --help", 2)
    except KeyboardInterrupt:
        return _fail("interrupted", None, 130)
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug: one line, with the way to see the traceback
        if _debug():
            raise
        return _fail(
            f"internal error: {type(exc).__name__}: {exc}",
            "rerun with KVSTACK_DEBUG=1 for the traceback and report it",
            1,
        )


def main() -> None:
    sys.exit(run())
