"""The HTML report in a real browser (Debian's chromium driven by Playwright): its charts
render as SVG, its totals add up to the wall time, it asks for nothing over the network.

Skipped, with the reason, where chromium or playwright is absent (`.ci/run` installs both)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from console.config import Config
from console.services.ledger.book import book
from console.wiring.settings import ledger_settings
from tests.test_report import NOW, journal_file, run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="chromium is not installed (apt-get install -y chromium; .ci/run does)",
)


def test_report_charts_and_totals_in_chromium(tmp_path: Path) -> None:
    path, rows = journal_file(tmp_path)
    target = tmp_path / "ledger.html"
    code, _, _ = run(path, "html", output=str(target))
    assert code == 0
    expected = book(rows, ledger_settings(Config()), now=NOW).ledger
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(target.as_uri())
            # the timeline: a row per unit (the pod, W, A -> B), drawn with real widths
            timeline = page.locator("svg#timeline")
            assert timeline.get_attribute("data-units") == "3"
            segs = page.locator("svg#timeline rect.seg")
            assert segs.count() == sum(len(u.segments) for u in (expected.cluster, *expected.units))
            widths = page.eval_on_selector_all(
                "svg#timeline rect.seg", "els => els.map(e => e.getBoundingClientRect().width)"
            )
            assert all(w > 0 for w in widths)
            assert page.locator("svg#timeline rect.seg.capacity").count() >= 1
            # badput by cause: one bar per cause that cost time; money: spot and on-demand
            badput = {c for c, v in expected.cluster.seconds.items() if v > 0} - {"productive"}
            assert page.locator("svg#badput rect.bar").count() == len(badput)
            assert page.locator("svg#money rect.bar").count() == 2
            usd = page.get_attribute("svg#money rect.bar.spot", "data-usd")
            assert usd == f"{expected.money['spot_usd']:.2f}"
            # the totals: every cause's seconds add up to the wall time shown
            causes = page.eval_on_selector_all(
                "#totals tr[data-cause]:not([data-cause=wall]) td[data-seconds]",
                "els => els.map(e => parseFloat(e.dataset.seconds))",
            )
            wall = float(
                page.get_attribute("#totals tr[data-cause=wall] [data-seconds]", "data-seconds")
                or 0
            )
            assert sum(causes) == pytest.approx(wall, abs=0.01)
            assert wall == pytest.approx(expected.cluster.wall_s, abs=0.001)
            assert page.inner_text("#headline") == expected.headline()
            assert "spot saved $" in page.inner_text("#money-table")
            incident = page.locator("#incidents tr[data-incident]")
            assert incident.count() == 1
            assert "10m00s" in incident.inner_text()  # its capacity wait
        finally:
            browser.close()
    assert requests == [target.as_uri()]  # the page itself, nothing else
