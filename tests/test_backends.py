"""Backends: the one interface, real ONNX Runtime and AOTInductor compiles, the Neuron backend's clear
error."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from chipswap.compile.backends import BACKEND_NAMES, Backend, get_backend
from chipswap.errors import ChipswapError

HAS_NEURON = importlib.util.find_spec("torch_neuronx") is not None


class MLP(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x):
        h = torch.relu(self.a(x))
        return (self.b(h), h)


def test_every_backend_implements_the_protocol():
    for name in BACKEND_NAMES:
        be = get_backend(name)
        assert isinstance(be, Backend) and be.name == name
        assert isinstance(be.default_flags(), dict)


def test_unknown_backend_suggests():
    with pytest.raises(ChipswapError, match="did you mean onnxruntime"):
        get_backend("onnxruntim")


@pytest.mark.skipif(HAS_NEURON, reason="Neuron SDK installed: the real path runs instead")
def test_neuron_backend_says_sdk_missing(tmp_path):
    be = get_backend("neuron")
    calls = (be.check_available, be.version, lambda: be.compile(MLP(), {"x": torch.zeros(1, 16)}, tmp_path))
    for call in calls:
        with pytest.raises(ChipswapError, match="needs the AWS Neuron SDK.*torch-neuronx") as ei:
            call()
        assert "\n" not in str(ei.value)


def test_onnxruntime_roundtrip_and_shape_check(tmp_path):
    be = get_backend("onnxruntime")
    torch.manual_seed(0)  # the same weights and input on every run: a float32 difference is not a draw
    m = MLP().eval()
    x = torch.randn(2, 16)
    files = be.compile(m, {"x": x}, tmp_path, flags={"exporter": "legacy"})
    assert "model.onnx" in files and "io.json" in files
    art = be.load(tmp_path)
    got = art({"x": x})
    with torch.no_grad():
        ref = m(x)
    assert len(got) == 2
    # float32 through another runtime: agreement to rounding (relative 1e-4), not bit for bit
    pairs = zip(got, ref, strict=True)
    assert all(torch.allclose(torch.as_tensor(g), r, rtol=1e-4, atol=1e-5) for g, r in pairs)
    with pytest.raises(ChipswapError, match=r"shape \[2, 17\].*compiled for \[2, 16\]"):
        art({"x": torch.randn(2, 17)})
    # ONNX Runtime itself validates shapes too (the static graph), not only our check
    sess = art.extra["session"]
    with pytest.raises(Exception, match="(?i)invalid dimensions|Got: 3"):
        sess.run(None, {"x": torch.randn(3, 16).numpy()})


@pytest.mark.slow
def test_aotinductor_buckets_share_one_copy_of_weights(tmp_path):
    from chipswap.compile.backends.aoti import AOTInductorBackend, model_weights

    be = AOTInductorBackend()
    m = MLP().eval()
    dirs = {}
    for batch in (1, 3):
        d = tmp_path / f"b{batch}"
        d.mkdir()
        files = be.compile(m, {"x": torch.randn(batch, 16)}, d)
        assert "model.pt2" in files
        dirs[batch] = d
    weights = model_weights(m)  # ONE dict of tensors, passed to both buckets
    arts = {b: be.load(d, weights=weights, trust_native=True) for b, d in dirs.items()}
    for b, art in arts.items():
        x = torch.randn(b, 16)
        with torch.no_grad():
            got, ref = art({"x": x}), m(x)
        assert float((got[0] - ref[0]).abs().max()) < 1e-5
    # the packages hold no weights: changing the one shared tensor in place changes every bucket's answer
    # (model_weights returns views of m's own parameters, so eager m sees the change too)
    fqns = arts[1].extra["package"].get_constant_fqns()
    assert "a.weight" in fqns and "b.weight" in fqns
    x1, x3 = torch.randn(1, 16), torch.randn(3, 16)
    before = arts[1]({"x": x1})[0].clone(), arts[3]({"x": x3})[0].clone()
    with torch.no_grad():
        weights["b.weight"].mul_(2.0)
        after = arts[1]({"x": x1})[0], arts[3]({"x": x3})[0]
        assert float((after[0] - before[0]).abs().max()) > 1e-2
        assert float((after[1] - before[1]).abs().max()) > 1e-2
        assert float((after[0] - m(x1)[0]).abs().max()) < 1e-4
        assert float((after[1] - m(x3)[0]).abs().max()) < 1e-4
    # loading without weights is a clear error, not a crash
    with pytest.raises(ChipswapError, match="compiled without weights"):
        be.load(dirs[1], trust_native=True)
    # a folder outside chipswap's cache is native code from somewhere: refused without trust_native
    with pytest.raises(ChipswapError, match="only from its own cache"):
        be.load(dirs[1], weights=weights)
    with pytest.raises(ChipswapError, match=r"compiled for \[1, 16\]"):
        arts[1]({"x": torch.randn(2, 16)})
    # the raw package with a wrong shape raises (AOTI_RUNTIME_CHECK_INPUTS=1) instead of aborting the process
    code = (
        "import os, sys, torch\n"
        "from chipswap.compile.backends.aoti import AOTInductorBackend\n"
        "from tests.test_backends import MLP\n"
        "from chipswap.compile.backends.aoti import model_weights\n"
        f"art = AOTInductorBackend().load(r'{dirs[1]}', weights=model_weights(MLP().eval()),"
        " trust_native=True)\n"
        "pkg = art.extra['package']\n"
        "try:\n"
        "    pkg(x=torch.randn(2, 16))\n"
        "except Exception as exc:\n"
        "    print('raised', type(exc).__name__)\n"
    )
    env_root = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=env_root, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "raised RuntimeError" in r.stdout
