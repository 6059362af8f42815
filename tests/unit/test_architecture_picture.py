"""docs/architecture.svg is generated from docs/architecture.dot (`make docs-picture`, graphviz) and committed.
Checked here without graphviz: graphviz writes each node's and each edge's name into a <title>, so every node
and edge of the source must be in the SVG and nothing else; the labels too. Edit the .dot and forget to
re-render, and this fails."""

from __future__ import annotations

import html
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
NODE = re.compile(r"^\s*(\w+)\s*\[label=\"([^\"]*)\"", re.M)
EDGE = re.compile(r"^\s*(\w+)\s*->\s*(\w+)", re.M)


def _source() -> str:
    return re.sub(r"//[^\n]*", "", (DOCS / "architecture.dot").read_text(encoding="utf-8"))


def _titles() -> set[str]:
    svg = (DOCS / "architecture.svg").read_text(encoding="utf-8")
    return {html.unescape(t) for t in re.findall(r"<title>(.*?)</title>", svg)}


def test_every_node_and_edge_of_the_source_is_in_the_picture() -> None:
    source = _source()
    nodes = {name for name, _ in NODE.findall(source)}
    edges = {f"{a}->{b}" for a, b in EDGE.findall(source)}
    assert len(nodes) > 20 and len(edges) > 40
    titles = _titles() - {"tally"}  # the graph's own title
    assert nodes | edges == titles, (
        "docs/architecture.svg is stale: run `make docs-picture` "
        f"(only in the source: {sorted((nodes | edges) - titles)}; only in the SVG: {sorted(titles - nodes - edges)})"
    )


def test_the_labels_are_the_sources() -> None:
    svg = html.unescape((DOCS / "architecture.svg").read_text(encoding="utf-8"))
    for name, label in NODE.findall(_source()):
        for line in label.split("\\n"):
            assert f">{line}</text>" in svg, (
                f"node {name}: label line {line!r} not in the SVG (stale picture)"
            )


def test_the_picture_shows_the_flows_the_design_names() -> None:
    """The brief's flows: callback → notify → raw → SQS → worker → apply → outbox → bus; poller, refunds,
    recon (bills → S3 → match → diffs), keys, heartbeat, console, the one work queue."""
    edges = {f"{a}->{b}" for a, b in EDGE.findall(_source())}
    for edge in (
        "channels->apigw",
        "apigw->notify",
        "notify->notify_raw",
        "notify->apply_queue",
        "apply_queue->worker",
        "worker->booking",
        "booking->ledger",
        "orders->outbox",
        "outbox->bus",
        "schedule->poller",
        "refunds_fn->refunds",
        "recon->bills",
        "recon->recon_diff",
        "keys->merchants",
        "heartbeat->apigw",
        "console->workqueue",
    ):
        assert edge in edges, edge
