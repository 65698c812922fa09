"""Hugging Face ids through the real CLI: huggingface_hub resolving a cache laid out here, offline
failures, revisions, gated models, and the online path against a hub on loopback.

No test reaches the network: each run gets HF_HUB_OFFLINE=1 or an HF_ENDPOINT on 127.0.0.1 (a fake
hub in a thread, a closed port, or a listener that never answers).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli_run import CliResult, isolated_env, run_cli, tree_state
from tests.support.deps import ROOT
from tests.support.fake_hub import FakeHub, HubRepo, fake_hub
from tests.support.hf_cache import add_demo, add_snapshot, repo_dir

pytestmark = pytest.mark.integration

H100 = str(ROOT / "profiles" / "hardware" / "h100-sxm.json")
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_CONFIG = ROOT / "tests" / "fixtures" / "configs" / "Qwen2.5-0.5B-Instruct.json"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
TOKEN = "hf_kvstackTestTokenDoNotPrint123"


def kvstack(tmp: Path, *argv: str, timeout: float = 60, **env: str) -> CliResult:
    """``python -m kvstack ARGV`` with HOME, XDG and HF_HOME inside ``tmp``, no inherited HF setting."""
    base = {
        k: v for k, v in isolated_env(tmp).items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS"))
    }
    return run_cli(list(argv), cwd=tmp, env={**base, "HF_HOME": str(tmp / "hf"), **env}, timeout=timeout)


def plan_json(tmp: Path, *argv: str, **env: str) -> dict[str, object]:
    res = kvstack(tmp, "plan", *argv, "--hardware", H100, "--json", **env)
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


def one_line_error(res: CliResult, *words: str) -> str:
    """Exit 2, an ``error:`` line with ``words``, at most a ``hint:`` line more, no traceback."""
    assert res.code == 2, (res.stdout, res.stderr)
    lines = res.err_lines
    assert lines[0].startswith("error: ") and len(lines) <= 2, lines
    assert len(lines) == 1 or lines[1].startswith("hint: "), lines
    for word in words:
        assert word in lines[0], lines
    assert "Traceback" not in res.stderr and not res.survivors
    return lines[0]


@pytest.fixture
def qwen_cache(tmp_path: Path) -> Path:
    add_snapshot(tmp_path / "hf" / "hub", QWEN, {"config.json": QWEN_CONFIG}, commit=COMMIT)
    return tmp_path


def test_offline_plan_reads_the_cached_config(qwen_cache: Path) -> None:
    plan = plan_json(qwen_cache, "--model", QWEN, HF_HUB_OFFLINE="1")
    model = plan["model"]
    assert isinstance(model, dict)
    snapshot = repo_dir(qwen_cache / "hf" / "hub", QWEN) / "snapshots" / COMMIT
    assert (plan["model_path"], plan["model_revision"]) == (QWEN, None)
    assert (model["name"], model["source"]) == (QWEN, str(snapshot))
    assert (model["layers"], model["kv_heads"], model["head_dim"], model["max_context"]) == (24, 2, 64, 32768)
    assert plan["kv_bytes_per_token"] == 24 * 2 * 2 * 64  # fp8 KV on the H100


def test_the_same_id_through_hf_hub_cache(qwen_cache: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    (qwen_cache / "hf" / "hub").rename(moved)
    plan = plan_json(
        qwen_cache, "--model", QWEN, "--revision", COMMIT, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(moved)
    )
    assert plan["model_revision"] == COMMIT


def test_offline_missing_id_fails_fast_with_the_download_command(tmp_path: Path) -> None:
    before = tree_state(tmp_path)
    start = time.monotonic()
    res = kvstack(tmp_path, "plan", "--model", QWEN, HF_HUB_OFFLINE="1")
    elapsed = time.monotonic() - start
    line = one_line_error(
        res, QWEN, "not in the Hugging Face cache", "HF_HUB_OFFLINE=1", f"hf download {QWEN}"
    )
    assert line.endswith(f"download it with: hf download {QWEN}")
    assert elapsed < 5, elapsed  # no probe, no network: the model is resolved first
    assert tree_state(tmp_path) == before


def test_serve_fails_as_fast_for_a_missing_id(tmp_path: Path) -> None:
    start = time.monotonic()
    res = kvstack(tmp_path, "serve", "--model", "kvstack/not-cached", "--port", "8931", HF_HUB_OFFLINE="1")
    one_line_error(res, "kvstack/not-cached", "hf download kvstack/not-cached")
    assert time.monotonic() - start < 5


def test_a_revision_that_is_not_in_the_cache(qwen_cache: Path) -> None:
    res = kvstack(
        qwen_cache, "plan", "--model", QWEN, "--revision", "v2.0", "--hardware", H100, HF_HUB_OFFLINE="1"
    )
    line = one_line_error(res, "not at revision 'v2.0' (cached: main)", f"hf download {QWEN} --revision v2.0")
    assert "HF_HUB_OFFLINE=1" in line


def test_a_gated_id_without_a_token_names_the_variable(tmp_path: Path) -> None:
    repos = {"meta-llama/Gated-3B": HubRepo(commit="e" * 40, files={"config.json": b"{}"}, gated=True)}
    with fake_hub(repos) as hub:
        res = kvstack(tmp_path, "plan", "--model", "meta-llama/Gated-3B", HF_ENDPOINT=hub.url)
    line = one_line_error(res, "meta-llama/Gated-3B is a gated model", "no Hugging Face token", "HF_TOKEN")
    assert "hf auth login" in res.stderr and f"{hub.url}/meta-llama/Gated-3B" in res.stderr
    assert [auth for _, _, auth in hub.requests if auth] == []
    assert line


def test_a_refused_token_is_never_printed(tmp_path: Path) -> None:
    repos = {"meta-llama/Gated-3B": HubRepo(commit="e" * 40, files={"config.json": b"{}"}, gated=True)}
    with fake_hub(repos) as hub:
        res = kvstack(tmp_path, "plan", "--model", "meta-llama/Gated-3B", HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)
    one_line_error(res, "gated model", "token (HF_TOKEN or hf auth login) cannot read it")
    assert f"Bearer {TOKEN}" in [auth for _, _, auth in hub.requests]  # it was sent, to the hub only
    assert TOKEN not in res.stdout + res.stderr


def test_the_hubs_own_login_is_used(tmp_path: Path) -> None:
    config = QWEN_CONFIG.read_bytes()
    repos = {
        "meta-llama/Gated-3B": HubRepo(
            commit="e" * 40, files={"config.json": config}, gated=True, tokens=(TOKEN,)
        )
    }
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text(TOKEN)  # what `hf auth login` writes
    with fake_hub(repos) as hub:
        plan = plan_json(tmp_path, "--model", "meta-llama/Gated-3B", HF_ENDPOINT=hub.url)
    assert plan["model_path"] == "meta-llama/Gated-3B"


@pytest.fixture
def hub_with_qwen() -> Iterator[FakeHub]:
    config = QWEN_CONFIG.read_bytes()
    index = json.dumps({"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}).encode()
    repos = {
        QWEN: HubRepo(commit=COMMIT, files={"config.json": config, "model.safetensors": b"\0" * 4096}),
        "org/sharded": HubRepo(
            commit="d" * 40,
            files={
                "config.json": config,
                "model.safetensors.index.json": index,
                "model-00001.safetensors": b"x",
            },
        ),
    }
    with fake_hub(repos) as hub:
        yield hub


def test_online_fetches_only_the_small_files_into_the_cache(tmp_path: Path, hub_with_qwen: FakeHub) -> None:
    hub = hub_with_qwen
    plan = plan_json(tmp_path, "--model", QWEN, HF_ENDPOINT=hub.url)
    model = plan["model"]
    assert isinstance(model, dict)
    assert model["layers"] == 24 and model["checkpoint_bytes"] == 4096  # the hub's size of the one file
    assert hub.downloads() == [f"/{QWEN}/resolve/main/config.json"]
    snapshot = repo_dir(tmp_path / "hf" / "hub", QWEN) / "snapshots" / COMMIT
    assert (snapshot / "config.json").is_file() and model["source"] == str(snapshot)
    # The same id offline now comes from the cache the first run filled.
    assert plan_json(tmp_path, "--model", QWEN, HF_HUB_OFFLINE="1")["model"] == {
        **model,
        "checkpoint_bytes": None,
    }

    sharded = plan_json(tmp_path, "--model", "org/sharded", HF_ENDPOINT=hub.url)
    assert sharded["weight_bytes"] == 16_060_522_496  # the index's total, no weight downloaded
    assert not any(p.endswith(".safetensors") for p in hub.downloads())


def test_online_errors_name_the_cause(tmp_path: Path, hub_with_qwen: FakeHub) -> None:
    url = hub_with_qwen.url
    one_line_error(
        kvstack(tmp_path, "plan", "--model", "org/missing", HF_ENDPOINT=url), "has no model org/missing"
    )
    one_line_error(
        kvstack(tmp_path, "plan", "--model", QWEN, "--revision", "nope", HF_ENDPOINT=url),
        f"{QWEN} has no revision 'nope'",
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_hub_fails_in_seconds(tmp_path: Path) -> None:
    start = time.monotonic()
    res = kvstack(tmp_path, "plan", "--model", QWEN, HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    one_line_error(res, "cannot reach the Hugging Face Hub", QWEN)
    assert f"hf download {QWEN}" in res.stderr and "HF_HUB_OFFLINE=1" in res.stderr
    assert time.monotonic() - start < 5


def test_a_hub_that_never_answers_is_cut_off(tmp_path: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete in the kernel; nothing ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        res = kvstack(tmp_path, "plan", "--model", QWEN, HF_ENDPOINT=url, HF_HUB_ETAG_TIMEOUT="1")
        elapsed = time.monotonic() - start
    one_line_error(res, "cannot reach the Hugging Face Hub", "timed out")
    assert elapsed < 5, elapsed


def _dry_run(tmp: Path, *argv: str, **env: str) -> dict[str, object]:
    res = kvstack(
        tmp,
        "serve",
        "--dry-run",
        "--json",
        "--hardware",
        H100,
        "--cache-dir",
        str(tmp / "kv"),
        "--run-dir",
        str(tmp / "run"),
        *argv,
        **env,
    )
    assert res.code == 0, res.stderr
    assert TOKEN not in res.stdout + res.stderr
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


def test_serve_gives_the_engine_the_id_and_revision(tmp_path: Path) -> None:
    add_demo(tmp_path / "hf" / "hub", commit="c" * 40)
    add_demo(tmp_path / "hf" / "hub", commit="d" * 40, weights=False, refs=("weightless",))
    doc = _dry_run(tmp_path, "--model", "kvstack/demo", HF_HUB_OFFLINE="1", HF_TOKEN=TOKEN)
    argv = doc["argv"]
    assert isinstance(argv, list)
    assert "kvstack/demo" in argv and "--revision" not in argv
    assert "--load-format" not in argv  # the snapshot has the weights
    assert argv[argv.index("--served-model-name") + 1] == "kvstack/demo"

    pinned = _dry_run(tmp_path, "--model", "kvstack/demo", "--revision", "weightless", HF_HUB_OFFLINE="1")
    argv = pinned["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--revision") + 1] == "weightless"
    assert "--load-format" not in argv  # a hub id names real weights, never dummy ones
    assert pinned["fingerprint"] != doc["fingerprint"]  # another snapshot, another KV namespace


def _serve(tmp: Path, *argv: str, **env: str) -> CliResult:
    """A real `serve` (not a dry run) on a GPU snapshot: it must stop at its preflight."""
    run_dir, cache = tmp / "run", tmp / "kv"
    return kvstack(
        tmp, "serve", "--hardware", H100, "--port", "8933", "--cache-dir", str(cache),
        "--run-dir", str(run_dir), *argv, **env,
    )  # fmt: skip


def test_serve_refuses_a_snapshot_without_weights_offline(tmp_path: Path) -> None:
    # What kvstack's own online plan leaves in the cache: config.json, no weights.
    add_demo(tmp_path / "hf" / "hub", commit="d" * 40, weights=False, refs=("weightless",))
    before = tree_state(tmp_path)
    start = time.monotonic()
    res = _serve(tmp_path, "--model", "kvstack/demo", "--revision", "weightless", HF_HUB_OFFLINE="1")
    one_line_error(res, "has no weight files", "hf download kvstack/demo --revision weightless")
    assert time.monotonic() - start < 5
    assert tree_state(tmp_path) == before  # no run dir, no cache dir


def test_serve_refuses_an_uncached_catalog_id_offline(tmp_path: Path) -> None:
    # The catalog plans it without the cache; the engine could not load it.
    res = _serve(tmp_path, "--model", "meta-llama/Llama-3.1-8B-Instruct", HF_HUB_OFFLINE="1")
    one_line_error(res, "is not in the Hugging Face cache", "hf download meta-llama/Llama-3.1-8B-Instruct")
    res = _serve(tmp_path, "--model", "llama-3.1-8b", HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    one_line_error(res, "cannot reach the Hugging Face Hub", "meta-llama/Llama-3.1-8B-Instruct")


def test_a_catalog_alias_is_served_under_the_id_given(tmp_path: Path) -> None:
    # meta-llama/Llama-3.1-8B (the base model) shares its geometry with the catalog's instruct tune,
    # but the engine must load what was named.
    doc = _dry_run(tmp_path, "--model", "meta-llama/Llama-3.1-8B", HF_HUB_OFFLINE="1")
    argv = doc["argv"]
    assert isinstance(argv, list)
    assert "meta-llama/Llama-3.1-8B" in argv and "meta-llama/Llama-3.1-8B-Instruct" not in argv
    assert argv[argv.index("--served-model-name") + 1] == "meta-llama/Llama-3.1-8B"
    own = _dry_run(tmp_path, "--model", "meta-llama/llama-3.1-8b-instruct", HF_HUB_OFFLINE="1")["argv"]
    assert isinstance(own, list) and "meta-llama/Llama-3.1-8B-Instruct" in own  # the catalog's spelling
