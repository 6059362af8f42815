"""Webhooks without AWS (docs/webhooks.md): the signature against the Standard Webhooks reference library and its
published example, the thin event's amounts, the message group, the retry schedule and its window (R20, R38)."""

from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook
from tally.domain.events import DownstreamEvent
from tally.domain.webhooks import RETRY_SCHEDULE_S, RETRY_WINDOW_S, message_group, next_delay_s, thin
from tally.service.webhooks import new_secret, signature, signed_headers

EXAMPLE = (
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "msg_p5jXN8AQM9LWM0D4loKWxJek",
    1614265330,
    b'{"test": 2432232314}',
)


def test_R20_the_signature_is_the_standard_webhooks_one():
    secret, msg_id, ts, body = EXAMPLE
    assert (
        signature(*EXAMPLE) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )  # the scheme's own example
    assert signature(*EXAMPLE) == Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, tz=UTC), body)
    fresh = new_secret()
    now = int(datetime.now(tz=UTC).timestamp())
    headers = signed_headers(fresh, "OrderPaid:1#A:4200", now, b'{"type":"OrderPaid"}')
    assert Webhook(fresh).verify(b'{"type":"OrderPaid"}', headers) == {"type": "OrderPaid"}
    assert fresh.startswith("whsec_") and new_secret() != fresh


def test_R20_a_thin_event_has_cents_and_yuan_and_the_link_to_the_full_object():
    event = DownstreamEvent(
        "OrderPaid:1900000109#A1:42",
        "OrderPaid",
        {
            "event_id": "OrderPaid:1900000109#A1:42",
            "mchid": "1900000109",
            "out_trade_no": "A1",
            "sp_mchid": None,
            "amount_cent": 100005,
            "paid_cent": 99905,
            "paid_at": "2026-12-01T01:02:03.000Z",
        },
    )
    body = thin(event, "https://api.example/")
    assert body["type"] == "OrderPaid" and body["timestamp"] == "2026-12-01T01:02:03.000Z"
    data = body["data"]
    assert (data["amount_cent"], data["amount_yuan"], data["paid_cent"], data["paid_yuan"]) == (
        100005,
        "1000.05",
        99905,
        "999.05",
    )
    assert data["link"] == "https://api.example/orders/1900000109/A1" and "sp_mchid" not in data


def test_R20_one_order_is_one_message_group_per_endpoint():
    paid = DownstreamEvent("p", "OrderPaid", {"mchid": "19", "out_trade_no": "A1"})
    refund = DownstreamEvent("r", "RefundSucceeded", {"mchid": "19", "out_trade_no": "A1", "refund_no": "R1"})
    other = DownstreamEvent("o", "OrderPaid", {"mchid": "19", "out_trade_no": "A2"})
    assert message_group("ep_1", paid) == message_group("ep_1", refund) != message_group("ep_1", other)
    assert message_group("ep_1", paid) != message_group("ep_2", paid)


def test_R38_retries_back_off_for_three_days_then_give_up():
    first = 1_000_000.0
    delays = [next_delay_s(n, first, first) for n in range(1, 9)]
    assert delays == list(RETRY_SCHEDULE_S)
    assert next_delay_s(20, first, first + 2 * 86400) == 43200  # every 12 h on day 3
    assert next_delay_s(20, first, first + RETRY_WINDOW_S - 43200 + 1) is None  # past the window: a case
    assert next_delay_s(1, first, first, schedule=(1,), window_s=0) is None
