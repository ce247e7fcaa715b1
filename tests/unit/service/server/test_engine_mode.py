"""HEADWISE_ENGINE and HEADWISE_FRONTENDS: `auto` keeps the single in-process server on CPU,
picks process mode on CUDA unless whole-server workers are asked for, and contradictory or
impossible settings stop `headwise serve` with exit 2 and a message naming them."""

from __future__ import annotations

import argparse

import pytest

from headwise.service.backends import cuda
from headwise.service.server import serve
from headwise.service.settings import Settings, SettingsError, frontend_processes, load_settings


def settings(**kw) -> Settings:
    return Settings(**kw)


class Probe:
    def __init__(self, ok: bool):
        self.ok = ok


@pytest.mark.parametrize("kw, cuda_ok, mode", [
    ({}, False, "inproc"),
    ({}, True, "process"),
    ({"workers": 4}, True, "inproc"),  # whole-server workers asked for by number
    ({"provider": "cpu"}, True, "inproc"),
    ({"engine": "process"}, False, "process"),  # process mode on CPU: allowed, measured in bench/
    ({"engine": "inproc"}, True, "inproc"),
    ({"engine": "process", "workers": 1}, True, "process"),
])
def test_auto_picks_process_mode_on_cuda_only(monkeypatch, kw, cuda_ok, mode):
    monkeypatch.setattr(cuda, "probe", lambda device_id=0: Probe(cuda_ok))
    assert serve.resolve_engine(settings(**kw)) == mode


def test_process_mode_and_whole_server_workers_contradict():
    with pytest.raises(SettingsError, match="HEADWISE_ENGINE=process and HEADWISE_WORKERS=3"):
        serve.resolve_engine(settings(engine="process", workers=3))


def test_frontends_auto_leaves_two_cores_to_the_engine():
    assert frontend_processes(settings(), 16) == 14
    assert frontend_processes(settings(), 2) == 1
    assert frontend_processes(settings(frontends=5), 2) == 5


@pytest.mark.parametrize("env, says", [
    ({"HEADWISE_FRONTENDS": "0"}, "HEADWISE_FRONTENDS"),
    ({"HEADWISE_ENGINE": "gpu"}, "HEADWISE_ENGINE"),
    ({"HEADWISE_ENGINE": "process", "HEADWISE_WORKERS": "2"}, "HEADWISE_WORKERS=2"),
    ({"HEADWISE_FRONTEND_STALL_S": "0.05"}, "HEADWISE_FRONTEND_STALL_S: must be 0 (never) or at least 1 s"),
    ({"HEADWISE_FRONTEND_START_S": "0.5"}, "HEADWISE_FRONTEND_START_S: must be 0 (never) or at least 1 s"),
])
def test_serve_refuses_bad_settings_naming_them(tiny_package, monkeypatch, capsys, env, says):
    for var in ("HEADWISE_WORKERS", "HEADWISE_ENGINE", "HEADWISE_FRONTENDS", "HEADWISE_FRONTEND_STALL_S",
                "HEADWISE_FRONTEND_START_S"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HEADWISE_PROVIDER", "cpu")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = argparse.Namespace(models=str(tiny_package.parent), host=None, port=None, workers=None,
                              log_level="warning", access_log=False)
    assert serve.main(args) == 2
    assert says in capsys.readouterr().err


def test_settings_name_the_variable():
    with pytest.raises(SettingsError, match="HEADWISE_FRONTENDS"):
        load_settings(frontends=0)


@pytest.mark.parametrize("manifest, says", [
    ({"task": "translation"}, "task 'translation' is not served"),
    ({"task": "classification", "labels": []}, "a classification package needs architecture 'encoder' and 'labels'"),
])
@pytest.mark.parametrize("engine", ["inproc", "process"])
def test_serve_refuses_a_package_no_head_serves_before_starting(tiny_package, tmp_path, monkeypatch, capsys, manifest,
                                                                says, engine):
    """Checked with the packages, before any worker or engine process starts (exit 2), not
    left to the engine's load (an engine process's exit would be taken for a crash)."""
    import json
    import shutil

    folder = tmp_path / "models" / tiny_package.name
    shutil.copytree(tiny_package, folder)
    mf = folder / "manifest.json"
    mf.write_text(json.dumps({**json.loads(mf.read_text()), **manifest}))
    for var in ("HEADWISE_WORKERS", "HEADWISE_FRONTENDS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HEADWISE_PROVIDER", "cpu")
    monkeypatch.setenv("HEADWISE_ENGINE", engine)
    args = argparse.Namespace(models=str(folder.parent), host=None, port=None, workers=None,
                              log_level="warning", access_log=False)
    assert serve.main(args) == 2
    assert says in capsys.readouterr().err
