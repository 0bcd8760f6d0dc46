"""One notion of "this machine" (issue 32): a bench taken at any spelling of loopback, the unspecified address
or this machine's own name or address is judged like one taken at 127.0.0.1, through the real bench -> plan
--bench path; the canonicaliser is checked against the C library's inet_aton on random spellings; a server
that reports a GPU is refused for a Neuron instance (and the other way round).

The server is a stub that answers like chipswap serve (``/v1/models`` with a vocabulary, ``/v1/predict``
with a bucket) for the classifier example's model; the machine's detected devices are stood in for (a CPU
box), so the refusal does not depend on what the test machine has."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI
from hypothesis import example, given
from hypothesis import strategies as st

import chipswap.bench.host as host
from chipswap.bench.hostaddr import canonical_host, is_loopback, is_this_machine, parse_ipv4
from chipswap.bench.identity import BenchIdentity, host_mismatch
from tests.cli_helpers import run_inproc

CPU_BOX = {
    "cpu_model": "Xeon test box",
    "cpus": 2,
    "gpus": [],
    "neuron_devices": 0,
    "ec2_instance_type": None,
}


# ----------------------------------------------------------------------------------------------- pure
@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.000.000.001", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("\uff11\uff12\uff17\u3002\uff10\uff0e\uff10\uff0e\uff11", "127.0.0.1"),  # fullwidth digits and dots
        ("0", "0.0.0.0"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("::FFFF:7F00:1", "127.0.0.1"),
        ("::127.0.0.1", "127.0.0.1"),
        ("::ffff:0:127.0.0.1", "127.0.0.1"),
        ("[0:0:0:0:0:0:0:1]", "::1"),
        ("fe80::1%25eth0", "fe80::1"),
        ("[fe80::1%eth0]", "fe80::1"),
        ("LocalHost.", "localhost"),
        ("10.1.2.3", "10.1.2.3"),
        ("example.COM..", "example.com"),
    ],
)
def test_every_spelling_has_one_canonical_form(spelling: str, canonical: str) -> None:
    assert canonical_host(spelling) == canonical


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "127.255.255.254", "0.0.0.0", "0x0", "::1", "::", "[::ffff:127.0.0.1]",
     "localhost", "LOCALHOST.", "api.localhost", "ip6-localhost", "localhost.localdomain"],
)  # fmt: skip
def test_loopback_and_unspecified_forms_are_this_machine(host: str) -> None:
    assert is_loopback(host) and is_this_machine(host)


@pytest.mark.parametrize(
    "host",
    ["128.0.0.1", "10.0.0.1", "1.127.0.0", "::2", "fe80::1", "::ffff:10.0.0.1", "localhost.example.com",
     "notlocalhost", "127.0.0.256", "127.0.0.1.1", "08.0.0.1", "0x7f.0x100.0.0", "1" * 5000, ""],
)  # fmt: skip
def test_other_hosts_are_not(host: str) -> None:
    assert not is_loopback(host) and not is_this_machine(host)


def test_own_addresses_and_names_and_what_a_name_resolved_to_decide() -> None:
    own = ["vm-17", "192.0.2.2", "fd00::2"]
    assert is_this_machine("VM-17.", own) and is_this_machine("3221225986", own)  # 192.0.2.2 as one number
    assert is_this_machine("[fd00:0::2]", own) and not is_this_machine("192.0.2.3", own)
    assert is_this_machine("trace.example.com", own, ["192.0.2.2"])  # a name that resolved to us
    assert is_this_machine("trace.example.com", (), ["::ffff:127.0.0.1"])
    assert not is_this_machine("trace.example.com", own, ["198.51.100.7"])


def _spell(n: int, parts: int, bases: list[int], zeros: list[int], upper: bool) -> str:
    """The IPv4 address n written in `parts` inet_aton parts, each in its own base with leading zeros."""
    widths = [1] * (parts - 1) + [5 - parts]
    vals, rest = [], n
    for w in reversed(widths):
        vals.append(rest % 256**w)
        rest //= 256**w
    vals.reverse()
    out = []
    for v, base, z in zip(vals, bases, zeros, strict=False):
        if base == 16:
            digits = "0" * z + format(v, "x")
            out.append(("0X" + digits.upper()) if upper else "0x" + digits)
        elif base == 8:
            out.append("0" + "0" * z + format(v, "o"))
        else:
            out.append(str(v))
    return ".".join(out)


spellings = st.tuples(
    st.integers(1, 4),
    st.lists(st.sampled_from([8, 10, 16]), min_size=4, max_size=4),
    st.lists(st.integers(0, 3), min_size=4, max_size=4),
    st.booleans(),
)


@given(st.integers(0x7F000000, 0x7FFFFFFF), spellings)
@example(0x7F000001, (1, [10, 10, 10, 10], [0] * 4, False))  # 2130706433
@example(0x7F000001, (2, [10, 10, 10, 10], [0] * 4, False))  # 127.1
@example(0x7F000001, (4, [8, 8, 8, 8], [2, 2, 2, 2], False))  # 0000177.0000.0000.0001
def test_every_address_in_127_8_in_any_form_is_loopback(n: int, form) -> None:
    text = _spell(n, *form)
    assert socket.inet_aton(text) == ipaddress.IPv4Address(n).packed  # the C library reads it the same
    assert parse_ipv4(text) == ipaddress.IPv4Address(n)
    assert canonical_host(text) == str(ipaddress.IPv4Address(n)) and is_loopback(text)
    mapped = f"[::ffff:{n >> 16:x}:{n & 0xFFFF:x}]"
    assert is_loopback(mapped) and is_loopback(f"[::ffff:{ipaddress.IPv4Address(n)}]")
    assert canonical_host(f"[::{n >> 16:x}:{n & 0xFFFF:x}%25lo]") == str(ipaddress.IPv4Address(n))  # compat


@given(st.integers(0, 2**32 - 1), spellings)
def test_the_canonical_form_agrees_with_inet_aton_everywhere(n: int, form) -> None:
    text = _spell(n, *form)
    assert ipaddress.IPv4Address(socket.inet_aton(text)) == parse_ipv4(text) == ipaddress.IPv4Address(n)
    assert is_loopback(text) == (n == 0 or n >> 24 == 127)


@given(st.text(alphabet="0123456789abcdefxX.", max_size=40))
@example("127.0.0.1 ".strip())
@example("0x.0x")
@example("00000000000000000000000127.1")
def test_every_address_inet_aton_reads_is_read_the_same(text: str) -> None:
    """What the C library connects to, chipswap recognises; it accepts more only where browsers do (a trailing
    dot, an empty 0x part), which can only make more hosts "this machine", never fewer."""
    try:
        c_lib = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        c_lib = None
    ours = parse_ipv4(text)
    if c_lib is not None:
        assert ours == c_lib
    elif ours is not None:
        assert text.endswith(".") or any(p.lower() == "0x" for p in text.split(".")), text
    canonical_host(text)  # never raises
    canonical_host(f"[::ffff:{text}%25x]")


# ------------------------------------------------------------------------------------- the shell
def test_this_machines_own_name_and_addresses_are_beside() -> None:
    own = host.own_hosts()
    name = socket.gethostname()
    assert name in own and host.is_beside(f"http://{name}:8000")
    for addr in own:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            continue
        url = f"http://[{ip}]:8000" if ip.version == 6 else f"http://{ip}:8000"
        assert host.is_beside(url), url
    remote = "198.51.100.7"  # TEST-NET-2: never this machine's
    assert remote not in own and not host.is_beside(f"http://{remote}:8000")
    assert host.is_beside(f"http://{remote}:8000", peer="::ffff:127.0.0.1")  # where the probe landed


def test_a_slow_resolver_does_not_hang_the_decision(monkeypatch) -> None:
    calls = []

    def slow(name, *a, **k):
        calls.append(name)
        time.sleep(30)
        raise socket.gaierror("too slow")

    monkeypatch.setattr(host, "RESOLVE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(host.socket, "getaddrinfo", slow)
    t0 = time.monotonic()
    assert not host.is_beside("http://models.example.com:8000")
    assert time.monotonic() - t0 < 10 and calls  # bounded: two lookups of 0.2 s, not 30 s each


def test_a_name_that_resolves_to_loopback_is_beside(monkeypatch) -> None:
    real = socket.getaddrinfo

    def fake(name, *a, **k):
        if name == "rebind.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
        return real(name, *a, **k)

    monkeypatch.setattr(host.socket, "getaddrinfo", fake)
    assert host.is_beside("http://rebind.example.com:8000")


# ------------------------------------------------------------------------ device kind vs instance
def test_a_server_reporting_another_device_family_is_refused() -> None:
    gpu = BenchIdentity(device="gpu", backend="tensorrt")
    msg = host_mismatch(gpu, "trn1.32xlarge", "trainium", "Trainium", 16) or ""
    assert "'gpu'" in msg and "trn1.32xlarge" in msg and "Trainium" in msg
    assert "'cuda:0'" in (
        host_mismatch(BenchIdentity(device="cuda:0"), "inf2.xlarge", "inferentia", "x", 1) or ""
    )
    neuron = BenchIdentity(device="Neuron")
    msg = host_mismatch(neuron, "g5.xlarge", "gpu", "A10G", 1) or ""
    assert "'Neuron'" in msg and "g5.xlarge" in msg and "NVIDIA GPU" in msg
    assert (
        host_mismatch(BenchIdentity(device="neuron"), "inf2.xlarge", "inferentia", "Inferentia2", 1) is None
    )
    assert host_mismatch(BenchIdentity(device="gpu"), "g5.xlarge", "gpu", "A10G", 1) is None
    unknown = BenchIdentity(device="tpu")
    assert host_mismatch(unknown, "g5.xlarge", "gpu", "A10G", 1) is None  # not a family we know: not judged


# ---------------------------------------------------------------- through chipswap bench -> plan --bench
def _stub(device: str | None) -> FastAPI:
    """Answers like chipswap serve for the classifier example's model (bert-base)."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        entry = {"id": "bert-base", "kind": "classifier", "max_length": 128, "vocab_size": 1000,
                 "shapes": [[1, 128]], "backend": None, "device": device, "software": "stub"}  # fmt: skip
        return {"object": "list", "data": [entry]}

    @app.post("/v1/predict")
    async def predict():
        return {"bucket": {"seq_len": 128, "batch": 1, "fill": 1}, "timing_ms": {"queue": 0.1, "model": 1.0}}

    return app


def _own_ipv4() -> str | None:
    for addr in sorted(host.own_hosts()):
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            continue
        if ip.version == 4 and not ip.is_loopback:
            return str(ip)
    return None


@contextmanager
def _serve_everywhere(app: FastAPI) -> Iterator[tuple[int, set[str]]]:
    """The app on one port at 127.0.0.1 and, where this machine has them, ::1 and its own IPv4 address;
    yields (port, the extra addresses served)."""
    import uvicorn

    first = socket.socket()
    first.bind(("127.0.0.1", 0))
    port = first.getsockname()[1]
    socks, extra = [first], set()
    for fam, addr in ((socket.AF_INET6, "::1"), (socket.AF_INET, _own_ipv4())):
        if addr is None:
            continue
        s = socket.socket(fam)
        try:
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError:
            s.close()
            continue
        socks.append(s)
        extra.add(addr)
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", access_log=False))
    t = threading.Thread(target=server.run, kwargs={"sockets": socks}, daemon=True)
    t.start()
    deadline = time.monotonic() + 120  # a bound that holds at load 20, not a speed
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield port, extra
    finally:
        server.should_exit = True
        t.join(15)


SPELLINGS = ["127.1", "2130706433", "0x7f000001", "0x7f.1", "127.0.1", "0.0.0.0", "0", "localhost",
             "LOCALHOST", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]",
             "hostname", "own-address"]  # fmt: skip


@pytest.fixture(scope="module")
def stub_server():
    with _serve_everywhere(_stub(device=None)) as served:
        yield served


def _bench_and_plan(capsys, monkeypatch, tmp_path: Path, url: str) -> tuple[int, str, dict]:
    import json

    monkeypatch.setattr(host, "detect_host", lambda: dict(CPU_BOX))
    b = tmp_path / "b.json"
    code, _, err = run_inproc(
        capsys, "bench", url, "--requests", "6", "--rate", "50", "--duration", "5",
        "--slo-ms", "5000", "--instance", "inf2.xlarge", "--out", str(b),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(b.read_text())
    code, _, err = run_inproc(
        capsys, "plan", "--example", "classifier-serving", "--bench", str(b), "--no-aws",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    return code, err.replace(str(b), "B"), doc


_REFERENCE: dict[int, tuple[int, str, dict]] = {}  # the refusal at 127.0.0.1, once per worker and port


def _reference(capsys, monkeypatch, tmp_path: Path, port: int) -> tuple[int, str, dict]:
    if port not in _REFERENCE:
        (tmp_path / "ref").mkdir()
        _REFERENCE[port] = _bench_and_plan(capsys, monkeypatch, tmp_path / "ref", f"http://127.0.0.1:{port}")
    return _REFERENCE[port]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_this_machine_is_refused_like_127_0_0_1(
    spelling, stub_server, capsys, monkeypatch, tmp_path
) -> None:
    port, extra = stub_server
    if spelling == "[::1]" and "::1" not in extra:
        pytest.skip("no IPv6 loopback on this machine")
    if spelling == "hostname":
        spelling = socket.gethostname()
        if not host.resolve(spelling):
            pytest.skip("this machine's name does not resolve")
        if not any(ipaddress.ip_address(a).is_loopback or a in extra for a in host.resolve(spelling)):
            pytest.skip("this machine's name resolves to an address the stub does not listen on")
    if spelling == "own-address":
        spelling = next((a for a in extra if ipaddress.ip_address(a).version == 4), "")
        if not spelling:
            pytest.skip("no non-loopback IPv4 address on this machine")
    ref_code, ref_err, ref_doc = _reference(capsys, monkeypatch, tmp_path, port)
    assert ref_code == 2 and "no Neuron device" in ref_err and ref_err.count("\n") == 1, ref_err
    code, err, doc = _bench_and_plan(capsys, monkeypatch, tmp_path, f"http://{spelling}:{port}")
    assert doc["identity"]["host"] == ref_doc["identity"]["host"]  # the same machine, detected the same
    assert (code, err) == (ref_code, ref_err)
    assert not (tmp_path / "r" / "report.json").exists()  # nothing half-written


def test_a_gpu_server_is_refused_for_a_neuron_instance(capsys, monkeypatch, tmp_path) -> None:
    with _serve_everywhere(_stub(device="gpu")) as (port, _):
        code, err, doc = _bench_and_plan(capsys, monkeypatch, tmp_path, f"http://127.0.0.1:{port}")
    assert doc["identity"]["server"]["device"] == "gpu"
    assert code == 2 and err.count("\n") == 1, err
    assert "'gpu'" in err and "inf2.xlarge" in err and "Inferentia" in err
    assert "--accept-bench-mismatch" in err and "rerun chipswap bench" in err  # the fix
