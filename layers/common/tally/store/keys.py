"""Downloaded WeChat Pay platform certificates, shared by every container (docs/channels.md "Key rotation").

One item per merchant in the merchants table, `pk = platform_certs#wechatpay#{mchid}`:
`{"certs": {serial: {"pem": …, "not_after": epoch s}}, "refreshed_at": epoch s, "kind": "platform_certs"}`.
Public material only (certificates are public; no key, no secret). The item has no `channel`/`mchid`
attributes, so `MerchantStore.configured()` never lists it as a merchant.
"""

from __future__ import annotations

from typing import Any

from tally.store.codec import to_item
from tally.store.tables import Tables

PREFIX = "platform_certs#wechatpay#"


class PlatformCertStore:
    def __init__(self, tables: Tables):
        self.t = tables

    def get(self, mchid: str) -> dict[str, Any] | None:
        """{"certs": {serial: {"pem", "not_after"}}, "refreshed_at"} or None (never refreshed)."""
        item = self.t.get(self.t.merchants, PREFIX + mchid)
        if item is None:
            return None
        return {"certs": dict(item.get("certs") or {}), "refreshed_at": int(item.get("refreshed_at") or 0)}

    def put(self, mchid: str, certs: dict[str, dict[str, Any]], refreshed_at: float) -> None:
        clean = {
            serial: {"pem": str(c["pem"]), "not_after": int(c["not_after"])} for serial, c in certs.items()
        }
        self.t.ddb.put_item(
            TableName=self.t.merchants,
            Item=to_item(
                {
                    "pk": PREFIX + mchid,
                    "kind": "platform_certs",
                    "certs": clean,
                    "refreshed_at": int(refreshed_at),
                }
            ),
        )
