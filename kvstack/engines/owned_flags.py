"""Engine arguments kvstack owns: the flags it sets itself, refused among the user's in every spelling
the engines' parsers read."""

from __future__ import annotations

from kvstack.errors import UnsupportedError

# Flags kvstack sets from its own options. The engines' parsers keep the last value they read,
# accept unique abbreviations (vLLM's parses "--ho 0.0.0.0" as --host) and, for vLLM's
# FlexibleArgumentParser, underscores for dashes ("--api_key") and "--flag.key=value" for a field of a
# JSON flag; so the same flag in any of those spellings among the user's engine arguments would
# silently undo a decision kvstack made from its own value: a loopback bind, the key kept off the
# command line. tests/integration/test_engine_parsers.py checks every spelling with vLLM's parser.
KEY_FLAGS = ("--api-key", "--admin-api-key")
OWNED_FLAGS = {
    "--host": "give the bind address to kvstack: --host",
    "--port": "give the port to kvstack: --port",
    "--uds": "kvstack serves over TCP on --host and --port",
    # A YAML of arguments (both engines read one): kvstack cannot see what it sets.
    "--config": "pass those settings as engine arguments after -- instead of --config",
}


def flag_name(arg: str) -> str | None:
    """The long option an engine argument names, spelled as the engine's parser reads it.

    ``--api_key=X`` -> ``--api-key``; ``--kv_transfer_config.kv_role=x`` -> ``--kv-transfer-config``;
    None for a value or a short option.
    """
    if not arg.startswith("--") or len(arg) <= 2:
        return None
    name = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def sets_flag(arg: str, flag: str) -> bool:
    """``arg`` (an engine argument) sets ``flag``: spelled whole, with underscores, with ``=value`` or
    ``.field=value``, or as an abbreviation of it (refused even when the parser would find it ambiguous)."""
    name = flag_name(arg)
    return name is not None and len(name) > 2 and flag.startswith(name)


def _shown(arg: str) -> str:
    """The flag as the user typed it, without its value (which may be a secret)."""
    return arg.split("=", 1)[0].split(".", 1)[0]


def refuse_owned_flags(extra_args: list[str]) -> None:
    """Refuse engine arguments that would override the bind address, the port or the key."""
    for arg in extra_args:
        key = next((f for f in KEY_FLAGS if sets_flag(arg, f)), None)
        if key is not None:
            raise UnsupportedError(
                f"{_shown(arg)} in the engine arguments would put a key on the engine's "
                "command line, where every local user can read it",
                hint="give the key to kvstack instead: --api-key-file FILE or the KVSTACK_API_KEY variable",
            )
        owned = next((f for f in OWNED_FLAGS if sets_flag(arg, f)), None)
        if owned is not None:
            what = "settings" if owned == "--config" else owned
            raise UnsupportedError(
                f"{_shown(arg)} in the engine arguments would override the {what} kvstack "
                "sets (and the guards it chose for that address)",
                hint=OWNED_FLAGS[owned],
            )
