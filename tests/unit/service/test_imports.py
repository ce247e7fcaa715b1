"""The runtime carries no torch (docs/architecture.md): importing the app must not pull it in."""

import subprocess
import sys


def test_app_imports_without_torch():
    code = (
        "import sys; import headwise.service.api.app, headwise.service.server.serve, headwise.service.engine, headwise.service.backends.onnxruntime; "
        "app = headwise.service.api.app.create_app; "
        "bad = [m for m in ('torch', 'headwise.model', 'headwise.export', 'transformers', 'onnx', 'safetensors') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_nothing_read_at_import_time():
    code = (
        "import os; os.environ['HEADWISE_MAX_BATCH_SIZE'] = 'not a number'; "
        "import headwise.service.api.app, headwise.service.server.serve; print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
