"""The public API's reading half, as a researcher analyses a sweep: the real `wandb.Api()`
against the W&B emulator, on runs and artifacts logged by the real SDK (wandb-core).

One module fixture logs seven runs in two sweeps (one maximising `reward`, one
minimising `loss`), each with tags, config, history, a saved file, and artifacts with
aliases; each test then reads them in its own client process.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures_wandb import WandbEmu, run_client, wandb_emu

__all__ = ["wandb_emu"]

PY = sys.executable
E, P = "lab", "analyse"

SEED = textwrap.dedent(
    """
    import json, pathlib, wandb
    E, P = "lab", "analyse"
    params = {"lr": {"values": [0.1, 0.01, 0.001, 0.05]}, "opt": {"values": ["adam", "sgd"]}}
    up = wandb.sweep({"method": "random", "metric": {"name": "reward", "goal": "maximize"},
                      "parameters": params}, entity=E, project=P)
    down = wandb.sweep({"method": "random", "metric": {"name": "loss", "goal": "minimize"},
                        "parameters": params}, entity=E, project=P)
    # id, sweep, lr, opt, tags, rewards logged (summary: the last), loss in the summary
    RUNS = [
        ("a0", up, 0.1, "sgd", ["base"], [1, 5, 30], 0.9),
        ("a1", up, 0.01, "adam", ["base", "best"], [2, 20, 60], 0.3),
        ("a2", up, 0.001, "adam", ["wide"], [3, 4, 10], 0.5),
        ("a3", up, 0.05, "sgd", [], [0, 10, 40], 0.7),
        ("b0", down, 0.1, "sgd", ["base"], [2, 2, 55], 0.4),
        ("b1", down, 0.01, "adam", ["wide"], [1, 3, 50], 0.1),
        ("b2", down, 0.001, "sgd", ["wide", "best"], [0, 1, 35], 0.6),
    ]
    for rid, sweep, lr, opt, tags, rewards, loss in RUNS:
        run = wandb.init(entity=E, project=P, id=rid, name=f"run-{rid}", tags=tags,
                         config={"lr": lr, "opt": opt}, settings=wandb.Settings(sweep_id=sweep))
        for r in rewards:
            run.log({"reward": r, "loss": loss + 1.0 / (1 + r)})
        run.summary["loss"] = loss
        if rid == "a3":
            run.summary["bonus"] = 1
        pathlib.Path("notes.txt").write_text(f"notes of {rid}")
        run.save("notes.txt", policy="now")
        if rid in ("a0", "a1"):  # two checkpoints of one policy: v0 by a0, v1 by a1
            pathlib.Path("model.bin").write_text(f"weights of {rid}")
            art = wandb.Artifact("policy", type="model")
            art.add_file("model.bin")
            run.log_artifact(art, aliases=["best"] if rid == "a1" else ["first"])
        if rid == "b0":  # the other sweep starts from the best checkpoint
            run.use_artifact("policy:best")
        run.finish()
    print(json.dumps({"up": up, "down": down}))
    """
)


@pytest.fixture(scope="module")
def seeded(wandb_emu: WandbEmu, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The two sweep ids, after the seven runs are logged."""
    work = tmp_path_factory.mktemp("seed")
    done = run_client([PY, "-c", SEED], wandb_emu.env(work / "home"), work, timeout=240)
    assert done.returncode == 0, done.stderr
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return ids


def api(emu: WandbEmu, tmp_path: Path, body: str, *args: str) -> Any:
    """Run ``body`` (with ``api = wandb.Api()`` and ``out = {}`` set up) in a client
    process; it fills ``out``, which comes back as JSON."""
    script = "import json, sys, wandb\napi = wandb.Api()\nout = {}\n"
    script += textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    done = run_client([PY, "-c", script, *args], emu.env(tmp_path / "home"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert emu.trap.seen == []
    return json.loads(done.stdout.strip().splitlines()[-1])


FILTERS: dict[str, Any] = {
    "eq_state": {"state": "finished"},
    "eq_config": {"config.opt": "adam"},
    "ne": {"config.opt": {"$ne": "adam"}},
    "in_tags": {"tags": {"$in": ["best"]}},
    "nin_tags": {"tags": {"$nin": ["base", "wide"]}},
    "tag_plain": {"tags": "wide"},
    "gt": {"summary_metrics.reward": {"$gt": 40}},
    "gte": {"summary_metrics.reward": {"$gte": 40}},
    "lt": {"config.lr": {"$lt": 0.01}},
    "lte": {"config.lr": {"$lte": 0.01}},
    "regex_name": {"display_name": {"$regex": "^run-b"}},
    "regex_config": {"config.opt": {"$regex": "^sg"}},
    "regex_number": {"config.lr": {"$regex": "0"}},
    "exists": {"summary_metrics.bonus": {"$exists": True}},
    "not_exists": {"summary_metrics.bonus": {"$exists": False}},
    "display_name": {"display_name": "run-a2"},
    "and": {"$and": [{"tags": "base"}, {"config.opt": "sgd"}]},
    "or": {"$or": [{"display_name": "run-a0"}, {"summary_metrics.loss": {"$lt": 0.2}}]},
    "created_after_2000": {"createdAt": {"$gt": "2000-01-01T00:00:00"}},
    "created_before_2000": {"createdAt": {"$lt": "2000-01-01T00:00:00"}},
}


def test_runs_filters_each_operator(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """Every listed operator over config, summary, tags, display_name, state, createdAt
    and sweep selects exactly the runs it should (a regex on a number matches nothing,
    as in MongoDB)."""
    flts = {**FILTERS, "sweep": {"sweep": seeded["down"]}}
    got = api(
        wandb_emu,
        tmp_path,
        """
        for label, flt in json.loads(sys.argv[1]).items():
            out[label] = sorted(r.id for r in api.runs(sys.argv[2], filters=flt))
        """,
        json.dumps(flts),
        f"{E}/{P}",
    )
    every = ["a0", "a1", "a2", "a3", "b0", "b1", "b2"]
    assert got == {
        "eq_state": every,
        "eq_config": ["a1", "a2", "b1"],
        "ne": ["a0", "a3", "b0", "b2"],
        "in_tags": ["a1", "b2"],
        "nin_tags": ["a3"],
        "tag_plain": ["a2", "b1", "b2"],
        "gt": ["a1", "b0", "b1"],
        "gte": ["a1", "a3", "b0", "b1"],
        "lt": ["a2", "b2"],
        "lte": ["a1", "a2", "b1", "b2"],
        "regex_name": ["b0", "b1", "b2"],
        "regex_config": ["a0", "a3", "b0", "b2"],
        "regex_number": [],
        "exists": ["a3"],
        "not_exists": ["a0", "a1", "a2", "b0", "b1", "b2"],
        "display_name": ["a2"],
        "and": ["a0", "b0"],
        "or": ["a0", "b1"],
        "created_after_2000": every,
        "created_before_2000": [],
        "sweep": ["b0", "b1", "b2"],
    }


def test_runs_order_both_ways_and_pages(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """`order` sorts by a summary metric, a config value, a column or creation time, both
    ways; with per_page=2 the seven runs come in four pages through the cursor."""
    got = api(
        wandb_emu,
        tmp_path,
        """
        from wandb.apis.public.runs import Runs
        path = sys.argv[1]
        for order in ("-summary_metrics.reward", "+summary_metrics.reward", "+config.lr",
                      "-config.lr.value", "+display_name", "-created_at", "+created_at"):
            out[order] = [r.id for r in api.runs(path, order=order)]
        pages = []
        real = Runs._update_response
        def counted(self):
            pages.append(self.variables.get("cursor"))
            return real(self)
        Runs._update_response = counted
        api.flush()  # the Api keeps the listings above by path, filters and order
        paged = api.runs(path, order="+summary_metrics.reward", per_page=2)
        out["paged"] = [r.id for r in paged]
        out["pages"] = pages
        out["len"] = len(paged)
        """,
        f"{E}/{P}",
    )
    by_reward = ["a1", "b0", "b1", "a3", "b2", "a0", "a2"]
    assert got["-summary_metrics.reward"] == by_reward
    assert got["+summary_metrics.reward"] == by_reward[::-1]
    # ties on lr keep creation order
    assert got["+config.lr"] == ["a2", "b2", "a1", "b1", "a3", "a0", "b0"]
    assert got["-config.lr.value"] == ["a0", "b0", "a3", "a1", "b1", "a2", "b2"]
    assert got["+display_name"] == ["a0", "a1", "a2", "a3", "b0", "b1", "b2"]
    assert got["+created_at"] == ["a0", "a1", "a2", "a3", "b0", "b1", "b2"]
    assert got["-created_at"] == got["+created_at"][::-1]
    assert got["paged"] == by_reward[::-1]
    assert got["len"] == 7
    assert len(got["pages"]) == 4, got["pages"]
    assert len(set(got["pages"])) == 4  # each page asked after a new cursor


def test_history_scan_files_and_download(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """history() and scan_history() by keys and step range; files() lists what the run
    saved, and download() brings its bytes."""
    got = api(
        wandb_emu,
        tmp_path,
        """
        run = api.run(sys.argv[1])
        out["history"] = run.history(keys=["reward"], pandas=False)
        out["scan"] = list(run.scan_history(keys=["reward"], min_step=1, max_step=3))
        out["scan_all"] = [r["_step"] for r in run.scan_history()]
        out["scan_from_2"] = [r["reward"] for r in run.scan_history(min_step=2)]
        files = run.files()
        out["files"] = sorted(f.name for f in files)
        out["count"] = len(files)
        f = run.file("notes.txt")
        out["size"] = f.size
        with f.download(root="dl", replace=True) as fh:
            out["text"] = fh.read()
        """,
        f"{E}/{P}/a1",
    )
    assert got["history"] == [
        {"_step": 0, "reward": 2},
        {"_step": 1, "reward": 20},
        {"_step": 2, "reward": 60},
    ]
    assert got["scan"] == [{"_step": 1, "reward": 20}, {"_step": 2, "reward": 60}]
    assert got["scan_all"] == [0, 1, 2]
    assert got["scan_from_2"] == [60]
    assert "notes.txt" in got["files"]
    assert "wandb-summary.json" in got["files"]
    assert got["count"] == len(got["files"])
    assert got["size"] == len("notes of a1")
    assert got["text"] == "notes of a1"


# A run of the update test's own, in its own project: the module's seven runs stay as logged,
# so the tests that read them pass in any order (the update renamed a2 and moved its lr, and
# the filter and order tests failed when a shuffled run put them after it).
ONE_RUN = textwrap.dedent(
    """
    import wandb
    run = wandb.init(entity="lab", project="edit", id="e0", name="run-e0", tags=["wide"],
                     config={"lr": 0.001, "opt": "adam"})
    run.log({"reward": 3, "loss": 0.5})
    run.summary["loss"] = 0.5
    run.finish()
    """
)


def test_run_update_writes_back_to_the_same_run(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """Tags, notes, name, config and summary edited through the API land on that run; no
    other run or project appears and the run stays finished."""
    work = tmp_path / "log"
    work.mkdir()
    done = run_client([PY, "-c", ONE_RUN], wandb_emu.env(work / "home"), work, timeout=120)
    assert done.returncode == 0, done.stderr
    got = api(
        wandb_emu,
        tmp_path,
        """
        path = sys.argv[1]
        project = path.rsplit("/", 1)[0]
        projects = sorted(p.name for p in api.projects("lab"))
        before = len(api.runs(project))
        run = api.run(path)
        run.tags.append("reviewed")
        run.notes = "the one to keep"
        run.name = "keeper"
        run.config["lr"] = 0.02
        run.summary["verdict"] = "good"
        run.update()
        api.flush()
        again = api.run(path)
        out = {
            "tags": again.tags, "notes": again.notes, "name": again.name,
            "lr": again.config["lr"], "verdict": again.summary.get("verdict"),
            "loss": again.summary.get("loss"), "state": again.state,
            "runs": [before, len(api.runs(project))],
            "projects": [projects, sorted(p.name for p in api.projects("lab"))],
        }
        """,
        "lab/edit/e0",
    )
    assert got["tags"] == ["wide", "reviewed"]
    assert got["notes"] == "the one to keep"
    assert got["name"] == "keeper"
    assert got["lr"] == 0.02
    assert got["verdict"] == "good"
    assert got["loss"] == 0.5  # the other summary keys are kept
    assert got["state"] == "finished"
    assert got["runs"] == [1, 1]
    assert got["projects"][0] == got["projects"][1]
    assert "uncategorized" not in got["projects"][1]


def test_sweep_best_run_by_goal_and_order(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """best_run() follows the sweep's metric and goal (maximize reward, minimize loss) or
    the order given; sweep.runs lists the sweep's runs only."""
    got = api(
        wandb_emu,
        tmp_path,
        """
        up = api.sweep(sys.argv[1])
        down = api.sweep(sys.argv[2])
        out = {
            "max": up.best_run().id,
            "min": down.best_run().id,
            "min_by_reward": down.best_run(order="-summary_metrics.reward").id,
            "up_worst_loss": up.best_run(order="-loss").id,
            "up_runs": sorted(r.id for r in up.runs),
            "down_runs": sorted(r.id for r in down.runs),
            "best_loss": down.best_loss,
        }
        """,
        f"{E}/{P}/{seeded['up']}",
        f"{E}/{P}/{seeded['down']}",
    )
    assert got == {
        "max": "a1",
        "min": "b1",
        "min_by_reward": "b0",
        "up_worst_loss": "a0",
        "up_runs": ["a0", "a1", "a2", "a3"],
        "down_runs": ["b0", "b1", "b2"],
        "best_loss": None,  # no run was handed out by the sweep's own controller
    }


def test_artifact_listings_lineage_and_aliases(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """api.artifacts / artifact_versions / artifact_collections list the two versions;
    logged_artifacts / used_artifacts / logged_by / used_by link checkpoints and runs;
    an alias moved onto v0 leaves v1; downloads by alias and by version."""
    got = api(
        wandb_emu,
        tmp_path,
        """
        p = "lab/analyse"
        out["artifacts"] = [a.name for a in api.artifacts("model", f"{p}/policy")]
        out["versions"] = [a.version for a in api.artifact_versions("model", f"{p}/policy")]
        out["collections"] = [c.name for c in api.artifact_collections(p, "model")]
        out["aliases"] = {a.version: sorted(a.aliases) for a in api.artifacts("model", f"{p}/policy")}
        out["logged_a1"] = [a.name for a in api.run(f"{p}/a1").logged_artifacts()]
        out["logged_a2"] = [a.name for a in api.run(f"{p}/a2").logged_artifacts()]
        out["used_b0"] = [a.name for a in api.run(f"{p}/b0").used_artifacts()]
        best = api.artifact(f"{p}/policy:best")
        out["logged_by"] = best.logged_by().id
        out["used_by"] = [r.id for r in best.used_by()]
        out["first_logged_by"] = api.artifact(f"{p}/policy:v0").logged_by().id
        out["by_alias"] = open(best.download(root="best") + "/model.bin").read()
        v0 = api.artifact(f"{p}/policy:v0")
        out["by_version"] = open(v0.download(root="v0") + "/model.bin").read()
        v0.aliases.append("best")
        v0.save()
        out["moved"] = api.artifact(f"{p}/policy:best").version
        out["v1_aliases"] = sorted(api.artifact(f"{p}/policy:v1").aliases)
        v0 = api.artifact(f"{p}/policy:v0")
        v0.aliases.remove("first")
        v0.save()
        out["v0_aliases"] = sorted(api.artifact(f"{p}/policy:v0").aliases)
        """,
    )
    assert got["artifacts"] == ["policy:v1", "policy:v0"]
    assert got["versions"] == ["v1", "v0"]
    assert got["collections"] == ["policy"]
    assert got["aliases"] == {"v1": ["best", "latest"], "v0": ["first"]}
    assert got["logged_a1"] == ["policy:v1"]
    assert got["logged_a2"] == []
    assert got["used_b0"] == ["policy:v1"]
    assert got["logged_by"] == "a1"
    assert got["used_by"] == ["b0"]
    assert got["first_logged_by"] == "a0"
    assert got["by_alias"] == "weights of a1"
    assert got["by_version"] == "weights of a0"
    assert got["moved"] == "v0"
    assert got["v1_aliases"] == ["latest"]
    assert got["v0_aliases"] == ["best"]


def test_bad_queries_are_errors_that_name_them(
    wandb_emu: WandbEmu, seeded: dict[str, str], tmp_path: Path
) -> None:
    """An unknown filter operator or a malformed order is refused by the server with a
    message naming it, never answered with every run."""
    got = api(
        wandb_emu,
        tmp_path,
        """
        for label, kw in (("op", {"filters": {"tags": {"$contains": "x"}}}),
                          ("order", {"order": "-summary_metrics."}),
                          ("key", {"order": "+nosuchcolumn.x"})):
            try:
                out[label] = [r.id for r in api.runs("lab/analyse", **kw)]
            except Exception as exc:
                out[label] = f"{type(exc).__name__}: {exc}"
        """,
    )
    assert "unknown operator '$contains'" in got["op"]
    assert "invalid order '-summary_metrics.'" in got["order"]
    assert "invalid order '+nosuchcolumn.x'" in got["key"]


BAD_SWEEPS = textwrap.dedent(
    """
    import json, wandb
    out = {}
    configs = {
        "bayes_no_metric": {"method": "bayes", "parameters": {"lr": {"min": 0.0, "max": 1.0}}},
        "no_distribution": {"method": "random", "parameters": {"lr": {}}},
        "bad_goal": {"method": "bayes", "metric": {"name": "loss", "goal": "lowest"},
                     "parameters": {"lr": {"min": 0.0, "max": 1.0}}},
    }
    for label, cfg in configs.items():
        try:
            out[label] = wandb.sweep(cfg, entity="lab", project="badsweeps")
        except BaseException as exc:
            out[label] = f"{type(exc).__name__}: {exc}"
    out["projects"] = sorted(p.name for p in wandb.Api().projects("lab"))
    print(json.dumps(out))
    """
)


def test_bad_sweep_configs_create_nothing(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """A bayes sweep without a metric, a parameter without a distribution, a goal that is
    neither: the server's error names the field and no sweep (nor project) is made."""
    done = run_client([PY, "-c", BAD_SWEEPS], wandb_emu.env(tmp_path / "home"), tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert 'bayesian search requires a "metric" section' in got["bayes_no_metric"]
    assert "invalid hyperparameter configuration: lr" in got["no_distribution"]
    assert "metric.goal must be minimize or maximize, got 'lowest'" in got["bad_goal"]
    assert "badsweeps" not in got["projects"]
    assert wandb_emu.trap.seen == []
