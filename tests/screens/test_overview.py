"""The overview's GKE rows (NODE POOL STATE ...): a node's own part whole, and a name longer
than its column ellipsised in the middle, so the end that tells nodes and slices apart shows.

On main (abc2917) a real GKE node name, whose cluster and pool GKE truncates (so the pool is
not found in it), was cut to its first 13 characters: every node of the cluster read
``gke-research-``, and a long pool name lost its ``-np-N``."""

from __future__ import annotations

from console.screens.overview import NODE_WIDTH, POOL_WIDTH, node_cells
from console.screens.state import middle_ellipsis
from console.services.model import HostState, HostStatus


def _node(name: str, pool: str) -> HostStatus:
    return HostStatus(index=0, name=name, ip="10.0.0.2", tpu_state=HostState.READY, pool=pool)


def test_an_emulated_node_shows_its_own_part_whole() -> None:
    cells = node_cells(
        _node("gke-phantom-gke-phantom-gke-np-0-3e01e57e-0003", "phantom-gke-np-0"), 0
    )
    assert cells[0][0] == "3e01e57e-0003"
    assert cells[1][0] == "phantom-gke-np-0"


def test_long_gke_names_keep_the_end_that_tells_them_apart() -> None:
    pool = "research-training-cluster-v5p-np-12"
    # GKE truncates the cluster's and the pool's names inside the node's
    names = [f"gke-research-traini-research-train-7d3c9f02-{s}" for s in ("x8kq", "p2mz")]
    shown = [node_cells(_node(n, pool), 0) for n in names]
    nodes = [c[0][0] for c in shown]
    assert all(len(n) == NODE_WIDTH for n in nodes)
    assert nodes[0] != nodes[1] and nodes[0].endswith("x8kq") and nodes[1].endswith("p2mz")
    assert shown[0][1][0].endswith("np-12") and len(shown[0][1][0]) == POOL_WIDTH


def test_middle_ellipsis() -> None:
    assert middle_ellipsis("w3", 6) == "w3"
    assert middle_ellipsis("phantom-gke-np-0", 6) == "pha…-0"
    assert middle_ellipsis("abcdefgh", 5) == "ab…gh"
