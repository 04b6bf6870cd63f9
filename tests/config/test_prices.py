"""[prices]: validation names the field and the fix; the shipped table and the overrides."""

from __future__ import annotations

import pytest

from console.config import Config, ConfigError, parse_config
from console.services.ledger.prices import SHIPPED, chips, generation, region
from console.wiring.settings import ledger_settings


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"spot_per_chip_hour": -1, "on_demand_per_chip_hour": 3},
            "prices.spot_per_chip_hour = -1.0: must be 0 (the shipped table) or more",
        ),
        (
            {"spot_per_chip_hour": 1.5},
            "prices.spot_per_chip_hour is set but prices.on_demand_per_chip_hour is not: set both",
        ),
        ({"region": "us-central2-b!"}, "prices.region = 'us-central2-b!': a region such as"),
        ({"accelerator_type": "tpu"}, "prices.accelerator_type = 'tpu': an accelerator type such"),
        ({"chips": "8"}, "prices.chips = '8': must be an integer"),
        ({"currency": "EUR"}, "prices.currency: unknown key; allowed: accelerator_type"),
    ],
)
def test_bad_prices_name_the_field_and_the_fix(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"prices": table})
    assert message in str(err.value)


def test_shipped_table_for_the_pods_accelerator_and_region() -> None:
    p = ledger_settings(parse_config({"cluster": {"accelerator_type": "v4-32"}})).pricing
    assert p.chips == 16
    assert p.rate == SHIPPED[("v4", "*")]
    assert "cloud.google.com/tpu/pricing" in p.rate.source
    gke = ledger_settings(
        parse_config({"cluster": {"provider": "gke"}, "gke": {"location": "us-east5"}})
    ).pricing
    assert (gke.accelerator_type, gke.region, gke.chips) == ("v5p-64", "us-east5", 32)


def test_config_overrides_the_table_and_an_unknown_accelerator_says_what_to_set() -> None:
    own = ledger_settings(
        parse_config(
            {"prices": {"spot_per_chip_hour": 1, "on_demand_per_chip_hour": 4, "chips": 4}}
        )
    ).pricing
    assert own.rate is not None
    assert (own.rate.spot, own.rate.on_demand, own.chips) == (1.0, 4.0, 4)
    assert own.rate.source.startswith("[prices] in ")
    unknown = ledger_settings(parse_config({"prices": {"accelerator_type": "v9-8"}})).pricing
    assert unknown.rate is None
    assert "set prices.spot_per_chip_hour and prices.on_demand_per_chip_hour" in unknown.why
    assert unknown.money(3600, 1800)["spot_saved_usd"] is None
    assert unknown.verdict(3600, 1800).startswith("no price: no shipped price for v9-8")


def test_accelerator_names() -> None:
    assert (generation("v5litepod-16"), chips("v5litepod-16")) == ("v5e", 16)
    assert (generation("v6e-8"), chips("v6e-8")) == ("v6e", 8)
    assert (generation("v4-8"), chips("v4-8")) == ("v4", 4)
    assert region("us-central2-b") == "us-central2"
    assert Config().prices.spot_per_chip_hour == 0.0
