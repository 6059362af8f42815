"""The audit vault (issue #36, docs/audit.md): the KMS signing key and the Object Lock bucket.

* `sign`: KMS Sign over the seal's canonical bytes (ECDSA_SHA_256: KMS hashes them with SHA-256); the private key
  never leaves KMS. `public_key_pem`: what an auditor verifies with, offline.
* `put_locked`: every object written in COMPLIANCE mode until now + the configured retention: nobody, the
  account's root included, can delete or shorten it before then. A second write of a key makes a new version;
  readers name the version they mean (`get`).
* evidence is kept by content: `evidence/<sha256>`; a piece already kept is not written again.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
from datetime import UTC, datetime, timedelta
from typing import Any

SIGNING_ALGORITHM = "ECDSA_SHA_256"
RAW_LIMIT = 4096
EVIDENCE_PREFIX = "evidence/"
SEAL_PREFIX = "seals/"


def evidence_key(sha256: str) -> str:
    return f"{EVIDENCE_PREFIX}{sha256}"


def seal_key(day: str, merchant: str) -> str:
    return f"{SEAL_PREFIX}{day}/{merchant}.json"


class AuditVault:
    def __init__(self, s3: Any, kms: Any, bucket: str, key_id: str, retention_days: int):
        self.s3 = s3
        self.kms = kms
        self.bucket = bucket
        self.key_id = key_id
        self.retention_days = retention_days

    def sign(self, message: bytes) -> bytes:
        """KMS hashes `message` (SHA-256) and signs it: a seal is far below KMS's 4096-byte RAW limit (one line
        per chain, LANES chains a merchant-day)."""
        if len(message) > RAW_LIMIT:
            raise ValueError(f"seal of {len(message)} bytes is past KMS's {RAW_LIMIT}-byte message limit")
        answer = self.kms.sign(
            KeyId=self.key_id, Message=message, MessageType="RAW", SigningAlgorithm=SIGNING_ALGORITHM
        )
        return bytes(answer["Signature"])

    def public_key_pem(self) -> str:
        der = bytes(self.kms.get_public_key(KeyId=self.key_id)["PublicKey"])
        body = "\n".join(textwrap.wrap(base64.b64encode(der).decode("ascii"), 64))
        return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"

    def put_locked(self, key: str, data: bytes, now_s: float, content_type: str = "application/json") -> str:
        """Write `data` under Object Lock COMPLIANCE; returns the version id."""
        until = datetime.fromtimestamp(now_s, UTC) + timedelta(days=self.retention_days)
        answer = self.s3.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType=content_type,
            ChecksumAlgorithm="SHA256",  # S3 asks Object Lock writes for an integrity checksum
            ObjectLockMode="COMPLIANCE",
            ObjectLockRetainUntilDate=until,
        )
        return str(answer.get("VersionId") or "")

    def keep_evidence(self, data: bytes, now_s: float) -> tuple[str, str]:
        """`data` kept under its SHA-256 (once); returns (sha256, version id)."""
        digest = hashlib.sha256(data).hexdigest()
        key = evidence_key(digest)
        try:
            head = self.s3.head_object(Bucket=self.bucket, Key=key)
            return digest, str(head.get("VersionId") or "")
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
        return digest, self.put_locked(key, data, now_s, "application/octet-stream")

    def get(self, key: str, version: str | None = None) -> bytes | None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if version:
            kwargs["VersionId"] = version
        try:
            return bytes(self.s3.get_object(**kwargs)["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NoSuchVersion"):
                return None
            raise

    def seals_of_day(self, day: str) -> list[str]:
        """The seal objects' keys of a day."""
        keys: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": f"{SEAL_PREFIX}{day}/"}
        while True:
            answer = self.s3.list_objects_v2(**kwargs)
            keys += [o["Key"] for o in answer.get("Contents", [])]
            if not answer.get("IsTruncated"):
                return sorted(keys)
            kwargs["ContinuationToken"] = answer["NextContinuationToken"]

    def seals_since(self, first_day: str) -> dict[tuple[str, str], str]:
        """(day, merchant) → when its seal object was written (ISO UTC), for every seal of `first_day` and
        after: one listing from that day on (keys sort by day), not one call a day."""
        found: dict[tuple[str, str], str] = {}
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": SEAL_PREFIX,
            "StartAfter": SEAL_PREFIX + first_day,
        }
        while True:
            answer = self.s3.list_objects_v2(**kwargs)
            for o in answer.get("Contents", []):
                day, _, name = str(o["Key"]).removeprefix(SEAL_PREFIX).partition("/")
                if name.endswith(".json"):
                    written = o.get("LastModified")
                    found[(day, name.removesuffix(".json"))] = (
                        written.astimezone(UTC).isoformat()
                        if isinstance(written, datetime)
                        else str(written or "")
                    )
            if not answer.get("IsTruncated"):
                return found
            kwargs["ContinuationToken"] = answer["NextContinuationToken"]


class BillFiles:
    """The bills the recon downloaded (BillsBucket `bills/{channel}/{mchid}/{date}/`): evidence for the seal."""

    def __init__(self, s3: Any, bucket: str):
        self.s3 = s3
        self.bucket = bucket

    def of_day(self, channel: str, merchant: str, day: str) -> list[tuple[str, bytes]]:
        """Every file under `bills/{channel}/{mchid}/{day}/` (store/recon.py's layout), with its bytes."""
        if not self.bucket:
            return []
        found: list[tuple[str, bytes]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": f"bills/{channel}/{merchant}/{day}/"}
        while True:
            answer = self.s3.list_objects_v2(**kwargs)
            for o in answer.get("Contents", []):
                body = self.s3.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read()
                found.append((o["Key"], bytes(body)))
            if not answer.get("IsTruncated"):
                return sorted(found)
            kwargs["ContinuationToken"] = answer["NextContinuationToken"]
