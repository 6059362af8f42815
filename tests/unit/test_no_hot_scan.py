"""R21: no Scan of the hot tables. Every `scan(` call of the product code (the layer, the handlers, the CLI) is in
a named one-off migration or reads small configuration; orders, refunds, the raw tables and the ledger are read
through their indexes (`--since`: GSI by_updated, store/changes.py; a day of the ledger: by_bill_shard)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "layers", ROOT / "functions", ROOT / "tally_cli"]

# (file, enclosing function): why it may scan
ALLOWED = {
    ("layers/common/tally/store/recon.py", "backfill_shards"): "one-off migration: the ledger's bill_shard",
    ("layers/common/tally/store/changes.py", "backfill_updated_shards"): "one-off migration: upd_shard",
    ("layers/common/tally/store/tables.py", "configured"): "the merchants table: small configuration",
    (
        "layers/common/tally/store/tables.py",
        "principals",
    ): "the merchants table's R53 grants: small configuration",
    (
        "layers/common/tally/store/tables.py",
        "names",
    ): "the merchants table's display names: small configuration",
}


def scans() -> set[tuple[str, str]]:
    """(file, enclosing function) of every DynamoDB-style scan call: `.scan(` with arguments (a bill parser's
    `.scan()` reads a file and takes none)."""
    found = set()
    for base in PRODUCT:
        for path in base.rglob("*.py"):
            tree = ast.parse(path.read_text("utf-8"))
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "scan"
                        and (node.args or node.keywords)
                    ):
                        found.add((str(path.relative_to(ROOT)), fn.name))
    return found


def test_r21_no_scan_of_orders_refunds_raw_or_ledger_outside_named_migrations():
    """R21: a Scan outside the named places is a hot-table read waiting to happen."""
    found = scans()
    assert found <= set(ALLOWED), f"scan( outside the named migrations: {sorted(found - set(ALLOWED))}"
    assert ("layers/common/tally/store/changes.py", "since") not in found  # --since is an index Query now
