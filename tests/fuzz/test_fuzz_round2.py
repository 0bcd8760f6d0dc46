"""Fuzz corpora for the input classes of issue 19, held to the same contract as tests/fuzz/test_fuzz_inputs.py
(exit code, one error line, no traceback, no write outside the case's roots, memory and time ceilings):

* ``pt2``: .pt2 archives with native members (an AOTInductor package, a shared object under any name, an ELF
  file under an innocent name), damaged archives and random bytes, read by ``check`` (exit 2, nothing loaded);
* ``compressed``: .csv.gz traces that expand far (bombs at random ratios), NUL bytes (sparse/binary files),
  long lines, read by ``shapes``;
* ``trace_links``: trace folders holding symlinks that stay inside or lead outside the folder;
* ``count_flags``: the count flags bounded in issue 19 (shapes --max-buckets/--max-batch/--align, project
  --nodes/--seq-len) with random integers;
* ``report_out``: ``plan --out`` into a folder that already holds files (the user's, or chipswap's own set),
  and over-long names: the user's files are never replaced.
"""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from chipswap.cli.main import main as cli_main
from tests.fuzz.harness import Sandbox, echoed_controls, run
from tests.fuzz.test_fuzz_inputs import REPO, _check, _params, _settings

ELF_HEAD = b"\x7fELF\x02\x01\x01" + b"\0" * 57


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    sandbox = tmp_path_factory.mktemp("fuzz2") / "sandbox"
    sandbox.mkdir()
    return Sandbox(sandbox, REPO)


@pytest.fixture(scope="module")
def plain_pt2(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    import torch

    class AddOne(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return input_ids + 1

    p = tmp_path_factory.mktemp("pt2") / "plain.pt2"
    torch.export.save(torch.export.export(AddOne(), (torch.ones(1, 8, dtype=torch.long),)), str(p))
    return p.read_bytes()


# ------------------------------------------------------------------------------------------------------ pt2
PT2_KINDS = ("aoti_package", "so_anywhere", "elf_renamed", "damaged", "random_bytes")


def _rezip(base: bytes, extra: dict[str, bytes], drop: str | None = None) -> bytes:
    import io

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as zin, zipfile.ZipFile(out, "w") as z:
        root = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            if drop and info.filename.endswith(drop):
                continue
            z.writestr(info, zin.read(info.filename))
        for name, data in extra.items():
            z.writestr(f"{root}/{name}", data)
    return out.getvalue()


@pytest.mark.parametrize("kind", _params("pt2", PT2_KINDS))
def test_fuzz_pt2_archives(box: Sandbox, plain_pt2: bytes, kind: str) -> None:
    names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_./", min_size=1, max_size=20).map(
        lambda s: s.strip("/.") or "x"
    )

    @_settings("pt2", kind, 2)
    @given(name=names, cut=st.integers(min_value=1, max_value=4000), junk=st.binary(min_size=0, max_size=512))
    def case(name: str, cut: int, junk: bytes) -> None:
        box.reset()
        if kind == "aoti_package":
            data = _rezip(plain_pt2, {f"data/aotinductor/model/{name}.wrapper.so": ELF_HEAD})
        elif kind == "so_anywhere":
            data = _rezip(plain_pt2, {f"extra/{name}.so": junk})
        elif kind == "elf_renamed":
            data = _rezip(plain_pt2, {f"data/weights/{name}": ELF_HEAD + junk})
        elif kind == "damaged":
            data = _rezip(plain_pt2, {}, drop="archive_version")[:cut]
        else:
            data = junk
        f = box.work / "model.pt2"
        f.write_bytes(data)
        outcome = run(box, lambda: cli_main(["check", str(f)]), cli=True)
        native = kind in ("aoti_package", "so_anywhere", "elf_renamed")
        _check("pt2", kind, outcome, allowed=(2,), extra=echoed_controls(outcome.out + outcome.err))
        if native and outcome.code == 2:
            assert "native code" in outcome.err, outcome.err

    case()


# ----------------------------------------------------------------------------------------- compressed traces
COMPRESSED_KINDS = ("bomb", "nul_bytes", "long_line", "mixed_members")
HEADER = b"prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("kind", _params("compressed", COMPRESSED_KINDS))
def test_fuzz_compressed_and_binary_traces(box: Sandbox, kind: str) -> None:

    @_settings("compressed", kind, 3)
    @example(mib=8, filler=b"1")
    @given(
        mib=st.integers(min_value=1, max_value=12), filler=st.sampled_from([b"0", b"1,1\n", b"\0", b"7" * 9])
    )
    def case(mib: int, filler: bytes) -> None:
        box.reset()
        body = filler * ((mib << 20) // len(filler))
        if kind == "bomb":
            data, name = gzip.compress(HEADER + body, compresslevel=9), "t.csv.gz"
        elif kind == "nul_bytes":
            data, name = HEADER + b"10,5\n" + b"\0" * (mib << 10), "t.csv"
        elif kind == "long_line":
            data, name = HEADER + b"10,5\n" + body.replace(b"\n", b"") + b",1\n", "t.csv"
        else:
            data = gzip.compress(HEADER + b"10,5\n" * 50) + gzip.compress(body, compresslevel=9)
            name = "t.csv.gz"
        f = box.work / name
        f.write_bytes(data)
        outcome = run(box, lambda: cli_main(["shapes", str(f), "--mode", "encoder", "--json"]), cli=True)
        _check("compressed", kind, outcome, allowed=(0, 2), extra=echoed_controls(outcome.out + outcome.err))

    case()


# ------------------------------------------------------------------------------------------------ trace links
@pytest.mark.parametrize("kind", _params("trace_links", ("outside", "inside", "chain", "dangling")))
def test_fuzz_trace_folder_links(box: Sandbox, kind: str) -> None:

    @_settings("trace_links", kind, 2)
    @given(n=st.integers(min_value=1, max_value=3), follow=st.booleans())
    def case(n: int, follow: bool) -> None:
        box.reset()
        folder = box.work / "traces"
        folder.mkdir()
        (folder / "a.csv").write_bytes(HEADER + b"10,5\n" * 20)
        secret = box.canary / "victim" / "precious.txt"  # never read as a trace unless asked
        for i in range(n):
            link = folder / f"l{i}.csv"
            if kind == "outside":
                link.symlink_to(secret)
            elif kind == "inside":
                link.symlink_to(folder / "a.csv")
            elif kind == "chain":
                (box.work / f"hop{i}.csv").symlink_to(secret)
                link.symlink_to(box.work / f"hop{i}.csv")
            else:
                link.symlink_to(folder / f"missing{i}.csv")
        argv = ["shapes", str(folder), "--mode", "encoder", "--json"] + (
            ["--follow-symlinks"] if follow else []
        )
        outcome = run(box, lambda: cli_main(argv), cli=True)
        allowed = (2,) if kind in ("outside", "chain") and not follow else (0, 2)
        _check(
            "trace_links", kind, outcome, allowed=allowed, extra=echoed_controls(outcome.out + outcome.err)
        )

    case()


# ------------------------------------------------------------------------------------------------ count flags
TRAIN = ["project", "tiny-distilbert", "-i", "trn1.32xlarge", "--train-tokens", "1e9"]
COUNT_FLAGS: dict[str, list[str]] = {
    "shapes_max_buckets": ["shapes", "--json", "--max-buckets", "{v}"],
    "shapes_align": ["shapes", "--json", "--align", "{v}"],
    "project_nodes": [*TRAIN, "--nodes", "{v}"],
    "project_seq_len": [*TRAIN, "--seq-len", "{v}"],
}


@pytest.mark.parametrize("kind", _params("count_flags", tuple(COUNT_FLAGS)))
def test_fuzz_count_flags(box: Sandbox, kind: str) -> None:

    @_settings("count_flags", kind, 3)
    @example(1_000_000_000)
    @example(0)
    @example(-5)
    @given(value=st.integers(min_value=-(2**40), max_value=2**40))
    def case(value: int) -> None:
        box.reset()
        argv = [a.replace("{v}", str(value)) for a in COUNT_FLAGS[kind]]
        outcome = run(box, lambda: cli_main(argv), cli=True)
        _check("count_flags", kind, outcome, allowed=(0, 2), extra=echoed_controls(outcome.out + outcome.err))

    case()


# ------------------------------------------------------------------------------------------------- report out
def _workload(box: Sandbox) -> Path:
    text = (
        'title = "fuzz"\n[traffic]\nsteady_rps = 20.0\nprompt_tokens = 512\noutput_tokens = 32\n'
        '[fleet]\ninstance = "g6e.xlarge"\ncount = 10\n[targets]\ncandidates = ["inf2.xlarge"]\n'
        "[porting]\nengineer_days = 10\n[throughput]\ngpu_requests_per_s = 3.0\n"
        '[throughput.candidates."inf2.xlarge"]\nrequests_per_s = 1.8\n'
    )
    p = box.work / "w.toml"
    p.write_text(text)
    return p


@pytest.mark.slow  # two whole plans per input (make test-slow)
@pytest.mark.parametrize("kind", _params("report_out", ("user_files", "long_name", "own_set")))
def test_fuzz_plan_out_targets(box: Sandbox, kind: str) -> None:

    @_settings("report_out", kind, 2)
    @given(
        which=st.sampled_from(["report.html", "report.json", "report.md"]),
        length=st.integers(min_value=200, max_value=600),
        content=st.text(max_size=50),
    )
    def case(which: str, length: int, content: str) -> None:
        box.reset()
        wl = _workload(box)
        out = box.out
        if kind == "long_name":
            out = box.out / ("r" * length)
        elif kind == "user_files":
            out.mkdir()
            (out / which).write_text(content)
        else:
            assert run(box, lambda: cli_main(["plan", str(wl), "--out", str(out)]), cli=True).code == 0
        before = (out / which).read_text() if kind == "user_files" else None
        outcome = run(box, lambda: cli_main(["plan", str(wl), "--out", str(out)]), cli=True)
        allowed = {"user_files": (2,), "long_name": (0, 2), "own_set": (0,)}[kind]
        _check("report_out", kind, outcome, allowed=allowed, extra=echoed_controls(outcome.out + outcome.err))
        if before is not None:
            assert (out / which).read_text() == before  # the user's file is untouched

    case()
