"""LaunchSpec.public(): the dry-run form shows everything that will run, secrets masked."""

from __future__ import annotations

from kvstack.runtime.specs import FileSpec, LaunchSpec, ProcessSpec


def test_public_masks_secrets_in_argv_env_files_and_helpers() -> None:
    secret = "hunter2-secret"
    spec = LaunchSpec(
        engine="vllm",
        connector="lmcache-mp",
        server=ProcessSpec(name="engine", argv=["python", "--api-key", secret], env={"X": f"a{secret}b"}),
        helpers=[ProcessSpec(name="helper", argv=["lmcache"], env={"LMCACHE_RESP_PASSWORD": secret})],
        files=[FileSpec(path="/r/x.yaml", content=f"remote_url: redis://u:{secret}@h:6379\n")],
        fresh_dirs=["/r/prometheus"],
        ports=[8000, 8001],
        base_url="http://127.0.0.1:8000",
        served_model_name="m",
        secrets=[secret],
    )
    public = spec.public()
    assert secret not in str(public)
    assert public["argv"] == ["python", "--api-key", "***"]
    assert public["helpers"][0]["env"] == {"LMCACHE_RESP_PASSWORD": "***"}
    assert public["files"][0]["mode"] == "0o600"
    assert public["fresh_dirs"] == ["/r/prometheus"] and public["ports"] == [8000, 8001]
    assert "secrets" not in spec.model_dump()
