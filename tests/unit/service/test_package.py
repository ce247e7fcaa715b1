"""Package loading: manifest checks, sha256 of every file, a clear CLI refusal."""

import argparse
import json

import pytest

from headwise.service.package import PackageError, find_packages, load_package
from headwise.service.server import serve as cli
from tests.unit.fakes import make_package


def serve(models, capsys, monkeypatch):
    for var in ("HEADWISE_MODELS_DIR", "HEADWISE_PORT"):  # the CLI writes its flags here; restore them
        monkeypatch.setenv(var, "")
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    code = cli.main(p.parse_args(["--models", str(models), "--port", "0"]))
    return code, capsys.readouterr().err


def test_loads_a_good_package(tmp_path):
    pkg = load_package(make_package(tmp_path))
    assert (pkg.name, pkg.n_layers, pkg.max_len) == ("tiny", 2, 32)
    assert set(pkg.variants) == {"fast", "attention"}
    assert [p.name for p in find_packages(tmp_path)] == ["tiny"]
    assert [p.name for p in find_packages(tmp_path / "tiny")] == ["tiny"]  # a package folder itself


@pytest.mark.parametrize("file", ["tokenizer.json", "attention.onnx"])
def test_hash_mismatch_names_the_file(tmp_path, file, capsys, monkeypatch):
    folder = make_package(tmp_path)
    with open(folder / file, "ab") as fh:
        fh.write(b" ")
    with pytest.raises(PackageError, match=rf"{file}: sha256 mismatch"):
        load_package(folder)
    code, err = serve(tmp_path, capsys, monkeypatch)
    assert code != 0 and file in err and "sha256" in err


def test_missing_file_and_bad_manifest(tmp_path, capsys):
    folder = make_package(tmp_path)
    (folder / "fast.onnx").unlink()
    with pytest.raises(PackageError, match=r"fast\.onnx: file missing"):
        load_package(folder)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(PackageError, match=r"manifest\.json: unreadable"):
        load_package(folder)
    (folder / "manifest.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(PackageError, match="missing fields"):
        load_package(folder)


def test_no_packages(tmp_path, capsys, monkeypatch):
    code, err = serve(tmp_path, capsys, monkeypatch)
    assert code == 2 and "no model package" in err


def test_bad_setting_from_the_cli(tmp_path, capsys, monkeypatch):
    make_package(tmp_path)
    monkeypatch.setenv("HEADWISE_PRECISION", "int3")
    code, err = serve(tmp_path, capsys, monkeypatch)
    assert code == 2 and "HEADWISE_PRECISION" in err


def test_variant_facts_survive_an_odd_manifest():
    from headwise.service.package import variant_facts

    assert variant_facts({}, "fast") == {}
    assert variant_facts({"parity": None, "speed": None, "variants": None}, "fast") == {}
    odd = {"parity": {"fast": {"passed": True, "other": 1}}, "speed": {"cpu": None, "workloads": [
        {"inputs_per_s": {"fast": 10.0}}, "junk", {"batch": 16, "tokens": 20}]}}
    assert variant_facts(odd, "fast") == {
        "quality": {"passed": True},
        "speed": {"cpu": None, "cpu_flags": [], "workloads": [{"batch": None, "tokens": None, "inputs_per_s": 10.0}]}}


def test_a_task_its_architecture_cannot_serve_is_refused(tmp_path):
    """An encoder generates nothing: refused at load, naming both, instead of failing at start-up."""
    folder = make_package(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "task": "generation"}))
    with pytest.raises(PackageError, match="task 'generation' is not served with architecture 'encoder'"):
        load_package(folder)
