"""`phantom report` over a fleet: a row per cluster, each read from its own journal (written
by the real journal writer, stamped with its cluster) and priced with its own slice, and the
fleet's total as the sum of those rows; a cluster with no rows and one never run are rows of
zeros; `--cluster NAME` restricts it to one; flags that read one cluster's files ask which."""

from __future__ import annotations

import asyncio
import html.parser
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from console import exit_codes
from console.cli import main
from console.config import Config, cluster_state_dir
from console.config.fleet import Fleet, parse_fleet
from console.report import report_main
from console.services.ledger.book import book
from console.services.ledger.timeline import BADPUT
from console.services.model import Event
from console.services.record.journal import Journal
from console.wiring.settings import ledger_settings
from tests.support.incident_rows import replay
from tests.support.ledger_rows import drill

START = 1_760_000_000.0
NOW = START + 9000.0
# pod-a: a v4-32 TPU VM pod in us-central2 (the drill at 20x); grpo: a v5p-64 GKE slice in
# us-east5 (the drill at 10x, an hour later); idle: a journal opened and never written;
# spare: never run (no journal at all).
FLEET_TOML = """
[[clusters]]
name = "pod-a"
[clusters.cluster]
provider = "gcp"
project = "lab"
zone = "us-central2-b"
accelerator_type = "v4-32"
node_name = "pod-a"

[[clusters]]
name = "grpo"
[clusters.cluster]
provider = "gke"
[clusters.gke]
tpu_type = "v5p-64"
location = "us-east5"
run_dir = "{run}/grpo"

[[clusters]]
name = "idle"
[clusters.cluster]
provider = "gcp"
project = "lab"
zone = "us-central1-a"
accelerator_type = "v5litepod-16"
node_name = "idle"

[[clusters]]
name = "spare"
[clusters.cluster]
provider = "gcp"
project = "lab"
zone = "europe-west4-a"
accelerator_type = "v5litepod-8"
node_name = "spare"
"""
NAMES = ["pod-a", "grpo", "idle", "spare"]
WRITTEN = {
    "pod-a": drill(start=START, scale=20, earlier_job=True),
    "grpo": drill(start=START + 3600, scale=10),
    "idle": [],
}


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Fleet, Path]:
    """The fleet's config file and each cluster's journal in its own state dir, written
    through the real writer (``spare`` has none)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PHANTOM_NO_CONFIG_DISCOVERY", "1")
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET_TOML.format(run=tmp_path / "run"))
    import tomllib

    fleet = parse_fleet(tomllib.loads(path.read_text()), source=str(path))
    for config in fleet.members:
        rows = WRITTEN.get(config.name)
        if rows is None:
            continue
        journal = Journal(cluster_state_dir(config) / "journal.sqlite", cluster=config.name)
        asyncio.run(replay(journal, rows))
        journal.close()
    return fleet, path


def stored(config: Config) -> list[Event]:
    journal = Journal(cluster_state_dir(config) / "journal.sqlite")
    try:
        return journal.query(limit=100_000)
    finally:
        journal.close()


def run(configs: object, fmt: str, **kw: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = report_main(configs, fmt=fmt, out=out, err=err, clock=lambda: NOW, **kw)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def test_json_has_each_cluster_from_its_journal_and_the_total_is_their_sum(
    fleet: tuple[Fleet, Path],
) -> None:
    members = fleet[0].members
    code, out, err = run(members, "json")
    assert code == exit_codes.OK, err
    report = json.loads(out)
    assert list(report["clusters"]) == NAMES
    clusters = report["clusters"]
    for config in members[:3]:  # each the one-cluster report of its own journal and prices
        rows = stored(config)
        assert {e.cluster for e in rows} == ({config.name} if rows else set())
        expected = book(rows, ledger_settings(config), now=NOW).to_json()
        assert clusters[config.name] == json.loads(json.dumps(expected))
    assert len(stored(members[0])) > len(WRITTEN["pod-a"]) > 0  # the sink adds the summary
    assert stored(members[2]) == []
    # each priced with its own accelerator and region
    prices = {
        n: (c["prices"]["accelerator_type"], c["prices"]["region"]) for n, c in clusters.items()
    }
    assert prices == {
        "pod-a": ("v4-32", "us-central2"),
        "grpo": ("v5p-64", "us-east5"),
        "idle": ("v5litepod-16", "us-central1"),
        "spare": ("v5litepod-8", "europe-west4"),
    }
    assert clusters["pod-a"]["prices"]["spot_per_chip_hour"] == 0.97
    assert clusters["grpo"]["prices"]["spot_per_chip_hour"] == 1.47
    # no rows, and never run: zeros, no goodput
    for name in ("idle", "spare"):
        assert clusters[name]["wall_s"] == 0 and clusters[name]["goodput"] is None
        assert clusters[name]["money"]["chip_hours"] == 0
    assert any("spare" in n and "nothing recorded there yet" in n for n in report["notes"])

    total = report["total"]
    assert total["clusters"] == NAMES
    rows = clusters.values()
    assert total["wall_s"] == round(sum(c["wall_s"] for c in rows), 3) > 0
    assert total["productive_s"] == round(sum(c["productive_s"] for c in rows), 3)
    assert total["goodput"] == round(total["productive_s"] / total["wall_s"], 4)
    assert set(total["badput_s"]) == {str(c) for c in BADPUT}
    for cause, seconds in total["badput_s"].items():
        assert seconds == round(sum(c["badput_s"][cause] for c in rows), 3)
    assert total["badput_s"]["capacity"] > clusters["pod-a"]["badput_s"]["capacity"] > 0
    assert total["incidents"] == sum(len(c["incidents"]) for c in rows) == 2
    for key in ("chip_hours", "productive_chip_hours"):
        assert total["money"][key] == round(sum(c["money"][key] for c in rows), 4)
    for key in ("spot_usd", "on_demand_same_work_usd", "spot_saved_usd"):
        assert total["money"][key] == round(sum(c["money"][key] for c in rows), 2)
        assert clusters["grpo"]["money"][key] != clusters["pod-a"]["money"][key]
    assert total["money"]["unpriced"] == []
    assert report["headline"].startswith(f"goodput {total['goodput']:.1%}")
    assert report["start"] == min(clusters[n]["start"] for n in ("pod-a", "grpo"))
    assert report["end"] == NOW


def test_markdown_has_a_row_per_cluster_the_total_and_each_clusters_section(
    fleet: tuple[Fleet, Path],
) -> None:
    code, out, _ = run(fleet[0].members, "md")
    assert code == exit_codes.OK
    assert out.startswith("# Phantom preemption ledger: the fleet\n")
    lines = out.splitlines()
    table = [ln for ln in lines if ln.startswith("| ") and ln.split(" | ")[0][2:] in NAMES]
    assert [ln.split(" | ")[0][2:] for ln in table[:4]] == NAMES
    assert table[0].startswith("| pod-a | v4-32 (16 chips) in us-central2 | ")
    assert table[2].startswith("| idle | v5litepod-16 (16 chips) in us-central1 | 0.0s | - |")
    total = json.loads(run(fleet[0].members, "json")[1])["total"]
    (total_row,) = [ln for ln in lines if ln.startswith("| **total** | 4 clusters | ")]
    assert f"**{total['money']['chip_hours']:.2f}**" in total_row
    assert f"**${total['money']['spot_usd']:,.2f}**" in total_row
    assert "| cause | pod-a | grpo | idle | spare | total |" in out
    assert [ln for ln in lines if ln.startswith("## ")] == [
        "## Clusters", "## Badput by cause", *[f"## {n}" for n in NAMES],
    ]  # fmt: skip
    assert "### Money" in out and "| A → B | job |" in out


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: Counter[str] = Counter()
        self.rows: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids[str(a["id"])] += 1
        if tag == "tr" and ("data-cluster" in a or "data-total" in a):
            self.rows.append(a)


def test_html_has_the_fleet_table_and_a_section_per_cluster_with_ids_of_its_own(
    fleet: tuple[Fleet, Path], tmp_path: Path
) -> None:
    target = tmp_path / "fleet.html"
    code, out, err = run(fleet[0].members, "html", output=str(target))
    assert (code, out) == (exit_codes.OK, f"{target}\n"), err
    page = target.read_text()
    parsed = _Ids()
    parsed.feed(page)
    assert [i for i, n in parsed.ids.items() if n > 1] == []  # every id once
    assert {"fleet", "fleet-badput", "headline", "timeline-pod-a", "totals-grpo"} <= set(parsed.ids)
    assert [r.get("data-cluster") for r in parsed.rows] == [*NAMES, None]
    total = parsed.rows[-1]
    assert float(str(total["data-wall-s"])) == pytest.approx(
        sum(float(str(r["data-wall-s"])) for r in parsed.rows[:-1]), abs=0.01
    )
    assert "<script" not in page and "src=" not in page
    # written again over itself: it is a report
    code, _, err = run(fleet[0].members, "html", output=str(target))
    assert code == exit_codes.OK, err


def test_the_command_line_reports_the_fleet_and_cluster_restricts_it(
    fleet: tuple[Fleet, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = fleet
    assert main(["--config", str(path), "report", "--format", "json"]) == exit_codes.OK
    whole = json.loads(capsys.readouterr().out)
    assert list(whole["clusters"]) == NAMES and whole["total"]["clusters"] == NAMES
    assert main(["--config", str(path), "--cluster", "grpo", "report", "--format", "json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert "clusters" not in one and "total" not in one  # one cluster reads as it always did
    for key in ("jobs", "incidents", "prices", "start"):
        assert one[key] == whole["clusters"]["grpo"][key]
    assert main(["--config", str(path), "--cluster", "nope", "report", "--format", "md"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--cluster 'nope': no such cluster" in captured.err
    assert "pod-a, grpo, idle, spare" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize("flag", ["--journal", "--logs", "--runs"])
def test_one_clusters_files_over_a_fleet_ask_which_cluster(
    fleet: tuple[Fleet, Path], tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = fleet
    given = tmp_path if flag != "--journal" else cluster_state_dir(fleet[0].members[0])
    argv = ["--config", str(path), "report", "--format", "md", flag, str(given)]
    if flag == "--journal":
        argv[-1] = str(given / "journal.sqlite")
    assert main(argv) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert f"{flag} read one cluster's files" in err and "pass --cluster NAME" in err
    assert "4 clusters (pod-a, grpo, idle, spare)" in err


def test_a_fleet_with_no_journal_at_all_exits_2_naming_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    members = parse_fleet({"clusters": [{"name": "pod-a"}, {"name": "pod-b"}]}).members
    code, out, err = run(members, "json")
    assert (code, out) == (exit_codes.USAGE, "")
    assert "cluster 'pod-a': no journal at" in err and "cluster 'pod-b': no journal at" in err
    assert "nothing recorded there yet" in err
