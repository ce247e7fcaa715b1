"""headwise.export.optimize.unfuse_skip_layernorm: SkipLayerNormalization → Add (+ bias) + LayerNormalization,
the same numbers in onnxruntime's faster CPU kernels."""

import numpy as np
import onnx
import pytest

from headwise.export.optimize import CPU_DISABLED_OPTIMIZERS, unfuse_skip_layernorm
from headwise.service.backends.onnxruntime import CPU_DISABLED_OPTIMIZERS as SERVICE_DISABLED
from tests.fixtures.graphs import D, graph_with_skip_layernorms, run


@pytest.mark.parametrize("with_bias", [True, False])
def test_unfused_graph_computes_the_same(tmp_path, with_bias):
    fused, unfused = tmp_path / "fused.onnx", tmp_path / "unfused.onnx"
    graph_with_skip_layernorms(fused, with_bias)
    graph_with_skip_layernorms(unfused, with_bias)
    assert unfuse_skip_layernorm(unfused) == 2
    ops = [n.op_type for n in onnx.load(str(unfused)).graph.node]
    assert ops.count("SkipLayerNormalization") == 0 and ops.count("LayerNormalization") == 2
    assert ops.count("Add") == (3 if with_bias else 2)
    rng = np.random.default_rng(1)
    feeds = {k: rng.normal(size=(3, 5, D)).astype(np.float32) for k in ("x", "skip")}
    np.testing.assert_allclose(run(unfused, feeds), run(fused, feeds), atol=2e-6)
    assert unfuse_skip_layernorm(unfused) == 0  # nothing left: the file is not rewritten


def test_export_and_service_disable_the_same_fusion():
    assert list(CPU_DISABLED_OPTIMIZERS) == list(SERVICE_DISABLED) == ["SkipLayerNormFusion"]
