"""Reconciliation past one function: a Step Functions Distributed Map over the run's partitions.

The recon function still does the one parse and the guards (service/recon.py); above `map_bytes` it uploads the
partition files (service/recon_partition.py) to the bills bucket under `partitions/…/<run>/`, records the run as
RUNNING and starts the state machine (template.yaml ReconStateMachine):

    Partitions  Map, DISTRIBUTED, ItemReader s3:getObject items.json = [{"partition": 0}, … {"partition": 15}]
                → one child per partition: recon λ {"action": "partition"} = `child`: one bill partition against
                  one ledger shard, its diffs written (retried on a Lambda error)
    Merge       recon λ {"action": "merge", "results": [...]} = `merge`: the same run concluded from every
                partition's stats: MATCHED / DIFFS, report, heartbeat
    Failed      (Catch on the Map: a child failed after its retries, or the Map itself) recon λ
                {"action": "merge", "error": {...}} = `merge`: the run BLOCKED with the error as its reason

A partial MATCHED is impossible: only `merge` with every partition's result concludes a run, and a run with any
failed child is BLOCKED (ReconBlocked, alarmed). A child's diffs are real differences and stay OPEN either way.
"""

from __future__ import annotations

import re
import shutil
from typing import Any

from tally.observability import logger
from tally.service.recon import RUNNING
from tally.service.recon_partition import MANIFEST, Partitioned, tmp_dir

ITEMS = "items.json"


class DistributedRecon:
    def __init__(self, archive: Any, machine: Any):
        self.archive = archive  # store.recon.BillArchive (the bills bucket)
        self.machine = machine  # store.recon.ReconMachine

    @staticmethod
    def prefix(run: dict[str, Any]) -> str:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", run["sk"])
        return f"partitions/{run['channel']}/{run['mchid']}/{run['bill_date']}/{safe}/"

    def start(self, service: Any, run: dict[str, Any], parts: Partitioned) -> dict[str, Any]:
        prefix = self.prefix(run)
        parts.write_manifest()
        self.archive.put_files(prefix, parts.directory)
        self.archive.put_json(prefix + ITEMS, [{"partition": p} for p in range(parts.partitions)])
        run.update(
            status=RUNNING,
            path="distributed",
            partitions=parts.partitions,
            partition_prefix=prefix,
            running_since_s=int(service.clock()),
            reason=f"{parts.partitions} partitions on the Distributed Map",
        )
        run["execution_name"] = name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{run['pk']}_{run['sk']}")[-80:]
        service.store.put_run(run)  # what the children and the merge read; written once, before the start
        payload = {"pk": run["pk"], "sk": run["sk"], "bucket": self.archive.bucket, "prefix": prefix}
        payload["items_key"] = prefix + ITEMS
        try:
            run["execution"] = self.machine.start(name, payload)
        except Exception as exc:  # noqa: BLE001 - no execution: nothing else will conclude this run
            self.archive.delete_prefix(prefix)
            return service.block(run, "MAP_NOT_STARTED", f"the Distributed Map did not start: {exc}")
        logger.info(
            "recon: run on the Distributed Map", extra={"pk": run["pk"], "execution": run["execution"]}
        )
        return run


def child(service: Any, event: dict[str, Any]) -> dict[str, Any]:
    """One partition (a Map child): its files from S3 to ephemeral storage, matched, the result returned."""
    run = _run(service, event)
    p = int(event["partition"])
    work = tmp_dir(f"{run['pk']}/{run['sk']}/child{p:02d}")
    try:
        service.archive.get_files(
            event["prefix"], [MANIFEST, "head", f"p{p:02d}.idx", f"p{p:02d}.rows"], work
        )
        parts = Partitioned.load(work)
        return service.match_partition(run, parts, p)
    except Exception as exc:  # the Map retries and then fails; the merge names what failed, from the run row
        service.store.note_partition_error(
            run["pk"], run["sk"], f"partition {p}: {type(exc).__name__}: {exc}"
        )
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def merge(service: Any, event: dict[str, Any]) -> dict[str, Any]:
    """The Map's end: every partition's result → the run's verdict; a failure → BLOCKED with its reason."""
    run = _run(service, event)
    if run.get("status") != RUNNING:
        return run  # already concluded (a redelivered merge): nothing changes twice
    if run.get("partition_prefix"):  # the children are done with them (the results are in this event)
        service.archive.delete_prefix(run["partition_prefix"])
    if "error" in event:
        error = event["error"] or {}
        reason = f"the Distributed Map failed: {error.get('Error')}: {error.get('Cause')}"
        seen = list(dict.fromkeys(run.get("partition_errors") or []))  # each try noted; once each here
        if seen:
            reason += "; " + "; ".join(seen[:5])
        return service.block(run, "MAP_FAILED", reason[:1500])
    results = [r for r in event.get("results") or [] if isinstance(r, dict) and "partition" in r]
    missing = sorted(set(range(int(run.get("partitions", 0)))) - {int(r["partition"]) for r in results})
    if missing or not results:
        return service.block(
            run,
            "MAP_INCOMPLETE",
            f"no result for partition(s) {missing}: a child failed after its retries",
        )
    return service.conclude_partitions(run, results)


def _run(service: Any, event: dict[str, Any]) -> dict[str, Any]:
    run = service.store.run(event["pk"], event["sk"])
    if run is None:
        raise LookupError(f"no recon run {event['pk']} {event['sk']}")
    return run
