"""What the console's browser tests share: the demo merchant, an order created as its backend would, and a
payment the worker cannot book (it goes to a person)."""

from __future__ import annotations

import json
import time

from tally_local.sigv4 import signed_headers
from tests.browser.conftest import http, sim_post

MCHID = "1900000109"  # the demo merchant seed_demo configures


def create_order(stack, no: str, amount_cent: int = 506) -> None:
    body = json.dumps({"mchid": MCHID, "out_trade_no": no, "amount_cent": amount_cent, "description": "t"})
    url = stack.api_url + "/orders"  # signed as the merchant backend signs (R53, tally_local/sigv4.py)
    status, _, answer = http("POST", url, body.encode(), signed_headers("POST", url, body.encode(), {}))
    assert status == 201, answer


def unbooked_payment(stack, no: str) -> str:
    """A payment the worker cannot book (the channel says 0.05 yuan, the order 5.06): it goes to a person."""
    from tally import bootstrap

    create_order(stack, no)
    status, answer = sim_post(stack, "/_sim/pay", {"mchid": MCHID, "out_trade_no": no, "amount_total": 5})
    assert status == 200, answer
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stack.drain(5)
        found = [i for i in bootstrap.work_queue().list() if i.get("order") == no]
        if found:
            return found[0]["id"]
        time.sleep(0.1)
    raise AssertionError(f"{no} never reached the manual queue")
