"""The HTML report renders in headless Chromium: the verdict and the plot SVGs are in the rendered page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium not installed (make browser)")
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "plan", "--no-aws", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_rendered_dom_shows_verdict_and_plots(report: Path, tmp_path: Path) -> None:
    verdict = json.loads((report / "report.json").read_text())["verdict"]["verdict"]
    proc = _chromium(tmp_path, "--dump-dom", (report / "report.html").as_uri())
    dom = proc.stdout
    assert "<main>" in dom, proc.stderr[-2000:]
    m = re.search(r'<span class="verdict-text">([^<]*)</span>', dom)
    assert m is not None and m.group(1) == verdict
    svgs = re.findall(r"<svg\b[^>]*>", dom)
    classes = " ".join(svgs)
    for plot in ("cumulative", "monthly", "cpm", "arrivals", "fleetsize"):
        assert f"plot {plot}" in classes, plot
    assert len(svgs) >= 6  # + the traffic histogram with bucket edges from the shape planner
    assert "Request lengths and bucket edges" in dom
    assert 'id="breakeven"' in dom or verdict != "move serving to Inferentia"  # the break-even point
    namespaces = ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink")
    rest = dom
    for ns in namespaces:
        rest = rest.replace(ns, "")
    assert "<script" not in dom and "http://" not in rest and "https://" not in rest


def test_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    proc = _chromium(
        tmp_path, "--window-size=1000,2400", f"--screenshot={shot}", (report / "report.html").as_uri()
    )
    assert shot.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] >= 2000 and img.shape[1] >= 900
    rgb = (img[..., :3] * 255).astype(int)
    colors = {tuple(c) for c in rgb.reshape(-1, 3)[::37]}
    assert len(colors) > 50  # text, plots and colored boxes, not a blank page
    # the verdict box is drawn in one of the three verdict colours near the top of the page
    top = rgb[:400].reshape(-1, 3)
    verdict_fills = {(0xE8, 0xF5, 0xE9), (0xFD, 0xEC, 0xEA), (0xFF, 0xF8, 0xE1)}
    assert sum(tuple(p) in verdict_fills for p in top[::7]) > 100


# ---------------------------------------------------------------- QA: report details (no browser needed)


def test_trace_attribution_only_when_the_trace_was_used(report: Path, tmp_path: Path) -> None:
    assert 'id="trace-attribution"' in (report / "report.html").read_text()
    out = tmp_path / "train"
    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "plan", "--example", "finetune", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    html = (out / "report.html").read_text()
    assert json.loads((out / "report.json").read_text()).get("traffic") is None
    assert "Azure" not in html and "trace-attribution" not in html
    assert "Azure" not in (out / "report.md").read_text()


def test_padding_header_is_right_aligned_like_its_values(report: Path) -> None:
    html = (report / "report.html").read_text()
    table = html[html.index('<table id="baselines">') :]
    table = table[: table.index("</table>")]
    assert '<th class="num">Padding overhead</th>' in table
    assert 'td class="num"' in table
    assert "th.num" in html.split("</style>")[0]  # the CSS right-aligns th.num too


def _path_xs(svg: str, gid: str) -> list[float]:
    """x coordinates of the path inside matplotlib's <g id="GID"> groups (lines drawn by the report)."""
    return [float(m.group(1)) for m in re.finditer(rf'<g id="{gid}">\s*<path d="M ([\d.]+) ', svg)]


def test_histogram_last_edge_is_inside_the_plot(report: Path) -> None:
    html = (report / "report.html").read_text()
    svg = html[html.index("<title>Request lengths and bucket edges</title>") :]
    svg = svg[: svg.index("</svg>")]
    frame = re.search(r'<g id="frame">\s*<path d="M ([\d.]+) [\d.]+\s+L ([\d.]+) ', svg)
    assert frame is not None
    right = float(frame.group(2))
    edges = [x for i in range(64) for x in _path_xs(svg, f"edge-{i}")]
    buckets = json.loads((report / "report.json").read_text())["shapes"]["sequence_buckets"]
    assert len(edges) == len(buckets) >= 2
    assert max(edges) < right - 5  # every edge, the last one included, is drawn clear of the border


def test_every_plot_is_matplotlib_svg(report: Path) -> None:
    """One plotting library: every inline SVG of the report is matplotlib's, self-contained and titled."""
    html = (report / "report.html").read_text()
    svgs = re.findall(r"<svg\b.*?</svg>", html, re.S)
    assert len(svgs) >= 6
    for svg in svgs:
        assert 'class="plot ' in svg[:300] and "<title>" in svg
        assert '<g id="figure_1">' in svg  # matplotlib's figure structure
        assert "<metadata>" not in svg and "<?xml" not in svg


def test_arrival_chart_has_a_y_axis_label() -> None:
    from chipswap.report.html import arrivals_svg

    svg = arrivals_svg((10, 20, 15), 300.0, 1.0, 0.06)
    assert "requests/s" in re.sub(r"<[^>]+>", " ", svg)


# ------------------------------------------------ issue 22: chart rules, read from the DOM Chromium renders
def _dom(report: Path, tmp_path: Path) -> str:
    proc = _chromium(tmp_path, "--dump-dom", (report / "report.html").as_uri())
    assert "<main>" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def _plot(dom: str, name: str) -> str:
    start = dom.index(f'class="plot {name}"')
    return dom[start : dom.index("</svg>", start)]


def _box(svg: str, gid: str) -> tuple[float, float, float, float] | None:
    """(x0, x1, y0, y1) of the first path inside <g id="GID">."""
    m = re.search(rf'<g id="{gid}">\s*<path d="([^"]+)"', svg)
    if m is None:
        return None
    nums = [float(v) for v in re.findall(r"-?[\d.]+", m.group(1))]
    xs, ys = nums[0::2], nums[1::2]
    return min(xs), max(xs), min(ys), max(ys)


def _texts(svg: str) -> list[str]:
    return [re.sub(r"\s+", " ", t).strip() for t in re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("classifier")
    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "plan", "--example", "classifier-serving", "--no-aws", "--out",
         str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def test_slo_missing_option_is_never_the_lowest_solid_bar(report: Path, tmp_path: Path) -> None:
    """The bundled Llama example has an inf2.xlarge that can never meet the TTFT objective: it is drawn
    apart (hatched, 'misses SLO', below every solid bar), and no solid bar belongs to a missing option."""
    data = json.loads((report / "report.json").read_text())
    missing = [c for c in data["candidates"] if c.get("meets_slo") is False]
    assert missing, "the example should keep a candidate that misses the SLO"
    dom = _dom(report, tmp_path)
    for name in ("cpm", "monthly"):
        svg = _plot(dom, name)
        solid = [b for i in range(16) if (b := _box(svg, f"bar-{i}")) is not None]
        apart = [b for i in range(16) if (b := _box(svg, f"missed-{i}")) is not None]
        assert solid and "misses SLO" in " ".join(_texts(svg)), name
        priced = [c for c in missing if c.get("cost_per_million_usd" if name == "cpm" else "monthly_usd")]
        assert len(apart) == len(priced), (name, apart, priced)
        lowest_solid = max(b[3] for b in solid)  # SVG y grows downwards: the last row is the largest y
        assert all(a[2] > lowest_solid for a in apart), name  # below every solid bar
        assert not apart or 'style="fill: url(#' in svg  # hatched (an SVG pattern), not a plain colour


def test_tick_labels_read_and_legends_sit_off_the_data(classifier: Path, tmp_path: Path) -> None:
    dom = _dom(classifier, tmp_path)
    cpm = _plot(dom, "cpm")
    ticks = [t for t in _texts(cpm) if t.startswith("$")][:12]
    xticks = re.findall(r'<g id="xtick_\d+">.*?<text\b[^>]*>([^<]*)</text>', cpm, re.S)
    assert len(xticks) >= 3 and len(set(xticks)) == len(xticks), xticks  # no "$0" everywhere
    assert ticks
    for name in ("cumulative", "latency", "fleetsize"):
        svg = _plot(dom, name)
        frame = _box(svg, "frame")
        legend = re.search(r'<g id="legend_1">.*?<path d="M [\d.]+ ([\d.]+)', svg, re.S)
        assert frame is not None and legend is not None, name
        assert float(legend.group(1)) > frame[3], name  # the legend is below the axes, not on the data


def test_coinciding_series_are_all_visible_and_named(classifier: Path, tmp_path: Path) -> None:
    """inf2.xlarge and inf2.8xlarge carry the same chip and the same figures: both lines are drawn with
    different dash patterns and the legend says one is the same as the other."""
    dom = _dom(classifier, tmp_path)
    svg = _plot(dom, "fleetsize")
    styles = re.findall(r'<g id="size-\d+">\s*<path d="[^"]+"[^>]*style="([^"]+)"', svg)
    assert len(styles) >= 3 and len(set(styles)) == len(styles), styles
    assert any("(same as " in t for t in _texts(svg))


def test_caveats_and_negative_savings_in_words(report: Path, classifier: Path, tmp_path: Path) -> None:
    cls = _dom(classifier, tmp_path)
    summary = (classifier / "report.md").read_text()
    assert 'class="caveat"' in cls and "check quota" in re.sub(r"<[^>]+>", "", cls.split("</section>")[1])
    assert "> Before you move: check quota" in summary
    llama = (report / "report.html").read_text()
    kpi = re.search(r'id="kpi-saving">([^<]*)<', llama)
    assert kpi is not None and re.fullmatch(r"costs [\d.]+x as much", kpi.group(1)), kpi
    assert "$-" not in llama and "Saving -" not in llama and "$-" not in (report / "report.md").read_text()
    assert re.search(r"\+\$[\d,]+\.\d\d a month", llama)
