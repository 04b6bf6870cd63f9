"""The ledger's advice where every surface reads it (``book.read_book``: `status --json`, the
script's ``ledger`` verb, the Ledger screen): its save cost and training rate come from the
jobs' logs, as the advice given at submit does; a cluster that does not answer leaves the
ledger without advice, never without its numbers."""

from __future__ import annotations

import pytest

from console.services.ledger.advice import Advice, advise, checkpoint_cost, training_rate
from console.services.ledger.book import read_book
from console.status import collect_status
from engine.contract import CHECKPOINT_SAVED
from engine.trainconfig import DEFAULT_CHECKPOINT_EVERY
from tests.support.fake_services import T0, Behaviour, FakeServices
from tests.support.incident_rows import journaled_async, recorded

# What a trainer prints (engine.trainer, engine.metrics), as read back from a real run here.
LOG = "\n".join(
    [
        "[engine] progress step=1792/8192 pct=21.9 ep_rew_mean=33.1 ep_len_mean=33.1 fps=900 "
        "loss=45.35 value_loss=110.2",
        "[engine] " + CHECKPOINT_SAVED.format(step=2048, uri="/b/r/step-2048", seconds=0.2),
        "[engine] progress step=2304/8192 pct=28.1 ep_rew_mean=38.9 ep_len_mean=38.9 fps=1100 "
        "loss=39.3 value_loss=95.06",
        "[engine] progress step=2560/8192 pct=31.2 ep_rew_mean=40.27 ep_len_mean=40.27 fps=1000",
        "[engine] " + CHECKPOINT_SAVED.format(step=4096, uri="/b/r/step-4096", seconds=0.4),
    ]
)


def test_the_logs_give_the_save_cost_and_the_training_rate() -> None:
    lines = LOG.splitlines()
    assert checkpoint_cost(lines) == pytest.approx(0.3)
    assert training_rate(lines) == 1000.0
    assert training_rate(["[engine] progress step=10/20 pct=50.0 loss=1"]) is None


async def test_the_ledger_advises_from_the_jobs_logs() -> None:
    services = FakeServices("healthy", behaviour=Behaviour(logs=LOG))
    assert await services.list_jobs(), "the fixture lists jobs whose logs are read"
    services.events_list = await journaled_async(recorded(start=T0 - 600))
    now = services.snapshot().at
    got = (await read_book(services, now=now)).advice
    assert isinstance(got, Advice), got.render()
    assert (got.cost_s, got.steps_per_s, got.current_steps) == (
        pytest.approx(0.3),
        1000.0,
        DEFAULT_CHECKPOINT_EVERY,
    )
    assert got == advise(got.cost_s, got.mtbf_s, 1000.0, DEFAULT_CHECKPOINT_EVERY)
    assert got.badput_advised <= got.badput_current
    ledger = (await collect_status(services, refresh=False))["ledger"]
    assert ledger["advice"] == got.render() and ledger["advice_steps"] == got.steps


async def test_a_cluster_that_does_not_answer_leaves_the_numbers() -> None:
    services = FakeServices(
        "healthy", behaviour=Behaviour(logs=LOG, raise_in={"list_jobs": OSError("head down")})
    )
    services.events_list = await journaled_async(recorded(start=T0 - 600))
    book = await read_book(services, now=services.snapshot().at)
    assert book.advice.render().startswith("no checkpoint advice: no checkpoint save measured")
    assert book.ledger.cluster.wall_s > 0
