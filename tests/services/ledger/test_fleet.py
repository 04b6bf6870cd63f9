"""A fleet's total is the sum of its rows: a cluster with no price adds chip-hours and no
dollars (and is named), a cluster with no rows adds nothing; every cluster's ledger is read
side by side and one whose journal cannot be read is named, not summed."""

from __future__ import annotations

from typing import Any

from console.config.prices import PricesConfig
from console.services.ledger.book import LedgerSettings, book
from console.services.ledger.fleet import Figures, FleetBook, read_fleet
from console.services.ledger.prices import Pricing, pricing_for
from console.services.model import Event
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled, journaled_async
from tests.support.ledger_rows import drill

NOW = T0


def _settings(accelerator: str, zone: str) -> LedgerSettings:
    return LedgerSettings(pricing_for(PricesConfig(), accelerator, zone, "test"), hosts=4)


def test_an_unpriced_cluster_adds_chip_hours_and_no_dollars_and_is_named() -> None:
    rows = journaled(drill(start=NOW - 8400, scale=20))
    priced = book(rows, _settings("v4-32", "us-central2-b"), now=NOW)
    unpriced = book(rows, _settings("v9-8", "mars-1-a"), now=NOW)
    assert isinstance(unpriced.ledger.pricing, Pricing) and unpriced.ledger.pricing.rate is None
    empty = book([], _settings("v5litepod-8", "us-central1-a"), now=NOW)
    fleet = FleetBook({"a": priced, "b": unpriced, "c": empty})
    rows_ = fleet.rows
    total = fleet.total
    c = rows_["c"]  # no rows: every figure 0, no goodput
    assert (c.wall_s, c.chip_hours, c.spot_usd, c.goodput, c.unpriced) == (0, 0, 0, None, ())
    assert Figures.sum([rows_["a"], c]) == Figures.sum([rows_["a"]])
    assert total.unpriced == ("b",)
    assert total.spot_usd == rows_["a"].spot_usd and total.spot_usd is not None
    assert total.chip_hours == round(rows_["a"].chip_hours + rows_["b"].chip_hours, 4)
    assert rows_["b"].chip_hours == round(rows_["a"].chip_hours / 2, 4)  # 8 chips against 16
    assert "(without b: no price)" in total.headline()
    doc = fleet.to_json()
    assert doc["total"]["money"]["unpriced"] == ["b"]
    assert list(doc["clusters"]) == ["a", "b", "c"]


class Unreadable(FakeServices):
    """A cluster whose journal cannot be read."""

    async def events(self, *args: Any, **kwargs: Any) -> list[Event]:
        raise OSError("disk gone")


async def test_every_clusters_ledger_is_read_and_an_unreadable_one_is_named() -> None:
    a, b, c = FakeServices("healthy"), FakeServices("healthy"), Unreadable("healthy")
    a.events_list = await journaled_async(drill(start=NOW - 8400, scale=20))
    b.events_list = []
    fleet = await read_fleet({"a": a, "b": b, "c": c}, now=NOW)
    assert list(fleet.books) == ["a", "b"]
    assert fleet.rows["a"].wall_s == 8400 and fleet.rows["b"].wall_s == 0
    assert fleet.total.wall_s == 8400
    assert fleet.notes == ("c: its journal was not read (disk gone); the total leaves it out",)
