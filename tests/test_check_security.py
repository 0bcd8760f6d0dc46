"""Files from someone else cannot make `chipswap check` run code, read arbitrary files or allocate
without bound.

One test per class (issue 15), each failing on the code before the fix:
* a .pt2 archive carrying a pickle payload is refused (weights-only loading), also when a workload names it;
  --trust-pickle is the explicit opt-in;
* a factory module in the current folder is not imported unless asked (--factory-path, PYTHONPATH);
* a factory that is a stdlib function (sys:exit), exits or raises is one error line, exit 2;
* a preset is a name, never a path to a JSON file;
* a config asking for a million layers is refused before anything is built, naming the field and the bound.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from chipswap import models
from chipswap.errors import ChipswapError
from tests import badmodels
from tests.cli_helpers import run_inproc


class _Payload:
    """Unpickling this creates a file: the stand-in for arbitrary code in a hostile archive."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _payload_pt2(tmp_path: Path) -> tuple[Path, Path]:
    """A real torch.export archive whose sample-inputs entry is replaced by a pickle payload."""
    module, example = badmodels.make_good()
    ep = torch.export.export(module, (), example)
    good = tmp_path / "good.pt2"
    torch.export.save(ep, str(good))
    marker = tmp_path / "PWNED"
    buf = io.BytesIO()
    torch.save(((_Payload(marker),), {}), buf)
    bad = tmp_path / "model.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if "sample_inputs" in item.filename:
                data = buf.getvalue()
            dst.writestr(item, data)
    return bad, marker


def test_pt2_payload_is_refused_not_run(tmp_path, capsys):
    bad, marker = _payload_pt2(tmp_path)
    code, _, err = run_inproc(capsys, "check", str(bad))
    assert not marker.exists(), "the pickle payload ran"
    assert code == 2 and err.count("\n") == 1
    assert "weights-only" in err and "--trust-pickle" in err


def test_trust_pickle_is_the_explicit_opt_in(tmp_path, capsys):
    bad, marker = _payload_pt2(tmp_path)
    run_inproc(capsys, "check", str(bad), "--trust-pickle")
    assert marker.exists()  # with the flag the archive is unpickled as torch.export.load does


def test_clean_pt2_still_loads_weights_only(tmp_path, capsys):
    module, example = badmodels.make_good()
    p = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(module, (), example), str(p))
    code, out, err = run_inproc(capsys, "check", str(p), "--json")
    assert code == 0, err
    assert json.loads(out)["model_kind"] == "exported"


def test_pt2_named_by_a_workload_goes_through_the_same_refusal(tmp_path, capsys):
    """`chipswap plan` resolves model.preset with models.resolve_model; a .pt2 there is loaded
    weights-only."""
    bad, marker = _payload_pt2(tmp_path)
    ref = models.resolve_model(str(bad))  # what the plan pipeline calls with a workload's model.preset
    with pytest.raises(ChipswapError, match="weights-only"):
        models.load_exported(ref)
    with pytest.raises(ChipswapError, match="weights-only"):
        models.input_names(ref)
    assert not marker.exists()
    example = (
        Path(__file__).resolve().parents[1] / "src" / "chipswap" / "data" / "examples" / "llama-serving.toml"
    )
    wl = tmp_path / "wl.toml"
    wl.write_text(example.read_text().replace('preset = "llama-3-8b"', f'preset = "{bad}"'))
    code, _, err = run_inproc(capsys, "plan", str(wl), "--out", str(tmp_path / "report"))
    assert not marker.exists(), "the pickle payload ran through chipswap plan"
    assert code in (0, 1, 2) and "Traceback" not in err


def test_factory_in_the_current_folder_is_not_imported_by_accident(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "IMPORTED"
    (tmp_path / "evilfactory.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nfrom tests.badmodels import make_good as make\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m chipswap` would put the folder on sys.path
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sys.modules.pop("evilfactory", None)
    code, _, err = run_inproc(capsys, "check", "evilfactory:make")
    assert not marker.exists(), "a module from the current folder was imported"
    assert code == 2 and "--factory-path" in err and err.count("\n") == 1
    # asked for explicitly: imported and checked
    code, _, err = run_inproc(capsys, "check", "evilfactory:make", "--factory-path", ".")
    assert marker.exists() and code == 0, err
    sys.modules.pop("evilfactory", None)


def test_factory_file_path_is_explicit(tmp_path, capsys):
    f = tmp_path / "mine.py"
    f.write_text("from tests.badmodels import make_good\n")
    code, _, err = run_inproc(capsys, "check", f"{f}:make_good")
    assert code == 0, err


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("sys:exit", "not a model factory"),
        ("os:abort", "not a model factory"),
        ("builtins:breakpoint", "not a model factory"),
        ("tests.badmodels:make_exits", "called exit(3)"),
        ("tests.badmodels:make_raises", "forward raised RuntimeError"),
        ("tests.badmodels:make_forward_exits", "called exit(0)"),
    ],
)
def test_factory_that_exits_or_raises_is_one_line_exit_2(spec, needle, capsys):
    code, out, err = run_inproc(capsys, "check", spec)
    assert code == 2 and needle in err and err.count("\n") == 1 and err.startswith("chipswap: error: ")
    assert "Traceback" not in err + out


@pytest.mark.parametrize("name", ["../models/tiny-bert", "/etc/passwd", "tiny-bert/../../x", "..", "a/b"])
def test_preset_names_are_names_not_paths(name):
    with pytest.raises(ChipswapError, match="unknown model preset"):
        models.load_preset(name)
    with pytest.raises(ChipswapError, match="unknown model preset"):
        models.resolve_model(name, kind="preset")


def test_preset_kind_never_reads_a_json_file(tmp_path):
    cfg = tmp_path / "elsewhere.json"
    cfg.write_text(json.dumps({"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2}))
    with pytest.raises(ChipswapError, match="unknown model preset"):
        models.resolve_model(str(cfg), kind="preset")
    # the same path typed as the model spec is an explicit config path
    assert models.resolve_model(str(cfg)).kind == "hf-config"


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_hidden_layers", 1_000_000),
        ("hidden_size", 10**9),
        ("vocab_size", 10**12),
        ("max_position_embeddings", 10**9),
        ("num_attention_heads", 10**7),
    ],
)
def test_absurd_config_sizes_are_refused_before_building(field, value, tmp_path, capsys):
    cfg = {
        "model_type": "llama",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "vocab_size": 256,
        field: value,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    code, _, err = run_inproc(capsys, "check", str(p))
    assert code == 2 and field in err and "outside [0," in err and err.count("\n") == 1
    assert time.perf_counter() - t0 < 60  # refused before anything is built (a bound that holds at load 20)
    assert (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200 * 1024
    )  # < 200 MiB more (KiB units)


def test_huge_shape_flags_are_bounded(capsys):
    code, _, err = run_inproc(capsys, "check", "tiny-bert", "--shape", "input_ids=100000000x100000000")
    assert code == 2 and "dimension" in err
    code, _, err = run_inproc(
        capsys, "check", "tests.badmodels:make_good", "--shape", "x=1000000x1000000:float32"
    )
    assert code == 2 and "elements" in err


def test_pythonpath_naming_the_current_folder_trusts_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "okfactory.py").write_text("from tests.badmodels import make_good as make\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([".", os.environ.get("PYTHONPATH", "")]))
    sys.modules.pop("okfactory", None)
    code, _, err = run_inproc(capsys, "check", "okfactory:make")
    assert code == 0, err
    sys.modules.pop("okfactory", None)
