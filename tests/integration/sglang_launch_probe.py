"""Stands in for ``-m sglang.launch_server`` behind an exported SGLang container's entrypoint: parses
its arguments with SGLang's own parser, as launch_server does (``prepare_server_args(sys.argv[1:])``),
and writes what the server would run with to the JSON file named by KVSTACK_PROBE_OUT:
the API key SGLang took, this process's /proc/self/cmdline and environment, the --config file's mode.

Run by tests/integration/test_export_compose_run.py with SGLang (.sglang-parser/) on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path


def main() -> None:
    out = os.environ.pop("KVSTACK_PROBE_OUT")
    argv = sys.argv[1:]
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)
    config = argv[argv.index("--config") + 1] if "--config" in argv else None
    result = {
        "api_key": args.api_key,
        "model_path": args.model_path,
        "port": args.port,
        "cmdline": Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0"),
        "environ": dict(os.environ),
        "config_mode": stat.S_IMODE(os.stat(config).st_mode) if config else None,
    }
    Path(out).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
