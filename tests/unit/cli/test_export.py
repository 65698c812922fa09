"""`kvstack export` end to end through its typer command (registered on a fresh app, as app.py does),
with a recorded hardware snapshot and a catalog model: the real planner, exporters and writer."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import typer
import yaml

from kvstack.cli import export
from kvstack.errors import InputError, NetworkTargetError, PathError, UnsupportedError

ROOT = Path(__file__).resolve().parents[3]
H100 = str(ROOT / "profiles" / "hardware" / "h100-sxm.json")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PASSWORD = "hunter22-secret"


def run(*args: str) -> None:
    app = typer.Typer()
    export.register(app)

    @app.command("other")  # a second command keeps typer from collapsing the app into one command
    def _other() -> None:
        """Unused."""

    app(args=["export", *args], standalone_mode=False)


def base(fmt: str) -> list[str]:
    return ["--format", fmt, "--model", MODEL, "--hardware", H100, "--context", "128k", "--users", "8"]


def test_compose_with_a_local_redis_writes_private_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(
        *base("compose"),
        "--offload",
        "lmcache",
        "--remote",
        f"redis://:{PASSWORD}@127.0.0.1:6379",
        "--out",
        str(tmp_path),
    )
    out = capsys.readouterr()
    assert "wrote" in out.out and PASSWORD not in out.out + out.err
    doc = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    monitoring = {"redis-exporter", "kvstack-canary", "prometheus", "grafana"}
    assert set(doc["services"]) == {"vllm", "redis", *monitoring}
    assert (tmp_path / "prometheus-alerts.yml").exists()  # the canary's alerts, beside prometheus.yml
    assert PASSWORD not in (tmp_path / "compose.yaml").read_text()
    assert (tmp_path / "dashboard.json").exists()
    assert PASSWORD not in (tmp_path / "prometheus.yml").read_text()
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    assert PASSWORD in (tmp_path / ".env").read_text()
    assert (tmp_path / "lmcache.yaml").exists()
    with pytest.raises(PathError):
        run(*base("compose"), "--offload", "lmcache", "--out", str(tmp_path))
    run(*base("compose"), "--offload", "lmcache", "--out", str(tmp_path), "--force")


def test_the_password_can_come_from_a_file_and_stays_off_argv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "remote-url"
    secret.write_text(f"redis://:{PASSWORD}@127.0.0.1:6379\n")
    secret.chmod(0o600)
    out_dir = tmp_path / "out"
    run(*base("compose"), "--offload", "lmcache", "--remote-file", str(secret), "--out", str(out_dir))
    out = capsys.readouterr()
    assert "can be read by every local user" not in out.err  # no argv warning: the URL came from a file
    assert (
        PASSWORD in (out_dir / ".env").read_text() and PASSWORD not in (out_dir / "compose.yaml").read_text()
    )


def test_systemd_without_out_prints_the_unit(capsys: pytest.CaptureFixture[str]) -> None:
    run(*base("systemd"), "--offload", "native", "--port", "8123")
    out = capsys.readouterr()
    assert out.out.splitlines()[0].startswith("#") and "[Service]" in out.out
    exec_start = next(line for line in out.out.splitlines() if line.startswith("ExecStart="))
    assert (
        " serve --model " in exec_start and "--offload native" in exec_start and "--port 8123" in exec_start
    )
    assert f"--hardware {H100}" in exec_start
    assert "kvstack.env not printed" in out.err


def test_helm_values_come_from_the_plan(tmp_path: Path) -> None:
    run(*base("helm"), "--offload", "lmcache", "--out", str(tmp_path))
    spec = yaml.safe_load((tmp_path / "values.yaml").read_text())["servingEngineSpec"]["modelSpec"][0]
    assert spec["modelURL"] == MODEL and spec["vllmConfig"]["maxModelLen"] == 128 * 1024
    assert spec["lmcacheConfig"]["enabled"] is True


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--format", "kubernetes", "--model", MODEL, "--hardware", H100], InputError),
        ([*base("compose"), "--remote", "redis://cache"], NetworkTargetError),
        ([*base("compose"), "--port", "0"], InputError),
        ([*base("helm"), "--offload", "native", "--remote", "redis://cache:6379"], UnsupportedError),
    ],
)
def test_bad_input_exits_2(args: list[str], error: type[Exception]) -> None:
    with pytest.raises(error) as err:
        run(*args)
    assert isinstance(err.value, InputError) and err.value.exit_code == 2
