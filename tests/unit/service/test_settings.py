"""Settings: HEADWISE_* environment, the defaults of README's settings table, clear errors for bad values."""

import os

import pytest

from headwise.service.api.app import create_app
from headwise.service.settings import Settings, SettingsError, load_settings


def test_defaults(monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("HEADWISE_"):
            monkeypatch.delenv(k)
    s = load_settings()
    assert (s.max_batch_tokens, s.max_batch_size, s.max_wait_ms) == (16384, 64, 2)
    assert (s.max_client_batch, s.max_body_bytes, s.attention_budget_bytes) == (256, 4 << 20, 64 << 20)
    assert (s.provider, s.precision, s.grace_seconds, s.api_key) == ("auto", "auto", 25, None)


def test_environment_with_prefix(monkeypatch):
    monkeypatch.setenv("HEADWISE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("HEADWISE_PROVIDER", "cpu")
    monkeypatch.setenv("HEADWISE_API_KEY", "s3cret")
    s = load_settings()
    assert s.max_batch_size == 8 and s.provider == "cpu"
    assert s.api_key.get_secret_value() == "s3cret" and "s3cret" not in repr(s)


def test_empty_api_key_means_none(monkeypatch):
    monkeypatch.setenv("HEADWISE_API_KEY", "")
    assert load_settings().api_key is None


@pytest.mark.parametrize("var, value", [
    ("HEADWISE_PROVIDER", "gpu"), ("HEADWISE_PRECISION", "int4"), ("HEADWISE_MAX_WAIT_MS", "soon"),
    ("HEADWISE_MAX_BATCH_SIZE", "0"), ("HEADWISE_PORT", "70000"), ("HEADWISE_ATTENTION_BUDGET_BYTES", "-1"),
])
def test_bad_values_name_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=var):
        load_settings()


def test_validated_when_the_app_is_created(monkeypatch):
    monkeypatch.setenv("HEADWISE_MAX_QUEUE", "none")
    with pytest.raises(SettingsError, match="HEADWISE_MAX_QUEUE"):
        create_app()
    monkeypatch.delenv("HEADWISE_MAX_QUEUE")
    assert create_app(Settings(max_queue=3, max_client_batch=3)).state.settings.max_queue == 3


def test_workers_auto_is_one_process_on_cpu_and_several_on_cuda(monkeypatch):
    """HEADWISE_WORKERS=auto (the default): `headwise serve` resolves it before any worker
    starts and exports the number for them; an app run any other way is one process."""
    from headwise.service.backends import cuda
    from headwise.service.server import serve as cli
    from headwise.service.settings import Settings, worker_processes

    monkeypatch.setenv("HEADWISE_WORKERS", "auto")  # restored after the test: resolve_workers exports it
    auto = Settings()
    assert auto.workers == "auto" and worker_processes(auto) == 1
    assert Settings(workers=3).workers == 3
    with pytest.raises(ValueError):
        Settings(workers=0)

    assert cli.resolve_workers(Settings(provider="cpu", workers="auto")).workers == 1
    assert os.environ["HEADWISE_WORKERS"] == "1"
    monkeypatch.setattr(cli, "usable_cores", lambda: 16)
    monkeypatch.setattr(cuda, "device_memory", lambda device_id=0: 80 << 30)
    assert cli.resolve_workers(Settings(provider="cuda", workers="auto")).workers == 8
    assert os.environ["HEADWISE_WORKERS"] == "8"
    assert cli.resolve_workers(Settings(provider="cuda", workers=2)).workers == 2


def test_auto_workers_follow_cores_and_gpu_memory():
    from headwise.service.backends.cuda import auto_workers

    assert auto_workers(16, 80 << 30) == 8  # an H100 host: at most 8
    assert auto_workers(4, 80 << 30) == 2  # two cores per worker
    assert auto_workers(16, 16 << 30) == 4  # a 16 GiB card: 4 GiB per worker
    assert auto_workers(16, None) == 4  # memory unknown
    assert auto_workers(1, 2 << 30) == 1  # never fewer than one


def test_a_bad_worker_count_names_the_setting(monkeypatch):
    monkeypatch.setenv("HEADWISE_WORKERS", "0")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert "HEADWISE_WORKERS:" in str(e.value) and "CONSTRAINED" not in str(e.value)


def test_served_model_names_are_alias_pairs(monkeypatch):
    monkeypatch.setenv("HEADWISE_SERVED_MODEL_NAMES", " text-embedding-3-small = minilm, mini=minilm,")
    assert load_settings().served_model_names == {"text-embedding-3-small": "minilm", "mini": "minilm"}
    monkeypatch.setenv("HEADWISE_SERVED_MODEL_NAMES", "")
    assert load_settings().served_model_names == {}
    for bad, says in (("mini", "not alias=package"), ("=minilm", "not alias=package"),
                      ("a=x,a=y", "given twice"), ("a=m,a=m", "given twice"), ("a=m, a = m", "given twice")):
        monkeypatch.setenv("HEADWISE_SERVED_MODEL_NAMES", bad)
        with pytest.raises(SettingsError, match=f"HEADWISE_SERVED_MODEL_NAMES: .*{says}"):
            load_settings()
