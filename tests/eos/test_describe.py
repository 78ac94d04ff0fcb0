"""`app.describe()` / `eos describe`: the topology in Kafka Streams' layout, and as Mermaid and Graphviz."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eos.test_readme_testing import python_block, readme_app

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shows_what_eos_describe_prints_for_its_job(tmp_path):
    (tmp_path / "job.py").write_text(python_block("Writing a job"))
    done = subprocess.run([sys.executable, "-m", "eos.cli", "describe", "job.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = re.search(r"\*\*Describing a job\.\*\*.*?```text\n(.*?)```", README.read_text(), re.S)
    assert shown and done.stdout == shown.group(1)


def test_every_step_kind_internal_topics_and_pictures():
    shop = readme_app("Tables and joins").describe()
    text = str(shop)
    for expected in ["Processor: with_customer (stream-table join (left); stores: [with_customer-customers])",
                     "Processor: priced (stream-global join (left); stores: [products (global)])",
                     "Processor: paid (stream-stream join (left);",
                     "Processor: profiles (table-table join (outer);",
                     "Sink: subscriber-subscription.sink (topic: shop-subscriber-subscription (foreign-key "
                     "subscription))",
                     "Processor: subscriber.right (foreign-key join (right side); stores: [subscriber.right-customers, "
                     "subscriber.right-subscribers])",
                     "Source: tiers-repartition.source (topics: [shop-tiers-repartition (repartition)])",
                     "Processor: tiers (table aggregation; stores: [tiers-store])"]:
        assert expected in text, expected
    assert text.count("Sub-topology:") == 3 and shop.changelogs["tiers-store"] == "shop-tiers-store-changelog"
    windows = readme_app("Time and windows").describe()
    assert "windowed aggregation (TumblingWindows, emit=final)" in str(windows)
    mermaid = windows.render("mermaid")
    assert mermaid.startswith("flowchart LR") and '(["pageviews-per_page-repartition (repartition)"])' in mermaid
    assert mermaid.count("subgraph") == 4
    dot = windows.render("dot")
    assert dot.startswith('digraph "pageviews"') and '"topic:views" -> "node:views.source";' in dot
    assert dot.count("{") == dot.count("}")
    with pytest.raises(ValueError, match="text, mermaid or dot"):
        windows.render("svg")  # type: ignore[arg-type]


def test_eos_describe_says_what_is_wrong(tmp_path):
    (tmp_path / "job.py").write_text(python_block("Writing a job"))
    for args, message in ((["job.py", "--format", "svg"], "--format must be text, mermaid or dot"),
                          (["nowhere.py"], "nowhere.py")):
        done = subprocess.run([sys.executable, "-m", "eos.cli", "describe", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr, done.stderr
