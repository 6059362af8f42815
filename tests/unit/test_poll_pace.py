"""The poller's per-merchant rate limit holds under concurrency (docs/pull.md "The poller at volume").

Clocked, not timed: MerchantPace runs on a fake clock whose sleep moves time forward, so 16 threads racing
for two merchants' slots finish at once, and every grant time is exact."""

from __future__ import annotations

import threading

import pytest
from tally.service.pull import MerchantPace, pace_key


class FakeClock:
    """Monotonic fake time; `sleep(d)` returns at once and moves time to at least the sleeper's wake-up."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()
        self.sleeps = 0

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        with self.lock:
            self.sleeps += 1
            self.now += seconds


def most_in_any_window(grants: list[float], window_s: float = 1.0) -> int:
    """The most grants inside any half-open window [t, t + window_s)."""
    grants = sorted(grants)
    best, start = 0, 0
    for end, t in enumerate(grants):
        while grants[start] <= t - window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


def race(pace: MerchantPace, merchants: list[str], threads: int, calls_each: int) -> dict[str, list[float]]:
    grants: dict[str, list[float]] = {m: [] for m in merchants}
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker(i: int) -> None:
        barrier.wait()  # all threads ask at the same moment
        for j in range(calls_each):
            merchant = merchants[(i + j) % len(merchants)]
            at = pace.wait(merchant)
            with lock:
                grants[merchant].append(at)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in pool)
    return grants


@pytest.mark.parametrize("per_s", [1, 3, 10])
def test_rate_limit_holds_for_every_merchant_under_16_threads(per_s):
    clock = FakeClock()
    pace = MerchantPace(per_s, clock=clock, sleep=clock.sleep)
    grants = race(pace, ["wechatpay#1900000001", "wechatpay#1900000002"], threads=16, calls_each=10)
    for merchant, times in grants.items():
        assert len(times) == 80, merchant  # nobody lost, nobody granted twice
        assert most_in_any_window(times) <= per_s, merchant
        # and the limit is used, not undershot: 80 calls at per_s a second take about 80/per_s seconds
        assert max(times) - min(times) <= 80 / per_s + 1.0
    assert clock.sleeps > 0  # the threads did have to wait


def test_merchants_do_not_share_a_budget():
    clock = FakeClock()
    pace = MerchantPace(2, clock=clock, sleep=clock.sleep)
    assert [pace.wait("a"), pace.wait("a"), pace.wait("b"), pace.wait("b")] == [1000.0] * 4
    assert pace.wait("a") == 1001.0  # the third call of "a" waits for the first one's second to pass


def test_a_sub_merchant_spends_its_providers_rate():
    assert pace_key("wechatpay", {"mchid": "1900000109"}) == "wechatpay#1900000109"
    assert pace_key("wechatpay", {"mchid": "SUB1", "sp_mchid": "SP1"}) == "wechatpay#SP1"


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError):
        MerchantPace(0)


def test_every_attempt_retries_included_waits_for_the_signing_merchants_grant():
    """PullChannels takes the first grant; the channel's retries sleep through MerchantPace.retry_sleep,
    which takes one more grant per retry: a transient error retried twice spends three, on the provider's
    budget for a sub-merchant's order, and nothing is left set on the thread afterwards."""
    from tally.channels.retry import with_retries
    from tally.domain.poll import Answer, QueryResult
    from tally.service.pull import PullChannels

    clock = FakeClock()
    pace = MerchantPace(5, clock=clock, sleep=clock.sleep)
    asked: list[str] = []
    wait = pace.wait
    pace.wait = lambda merchant: asked.append(merchant) or wait(merchant)  # type: ignore[method-assign]
    sleep = pace.retry_sleep(lambda s: None)
    calls = []

    from tally.errors import TallyError

    class Busy(TallyError):
        retryable = True

    def query(order, fast):
        def attempt():
            calls.append(1)
            if len(calls) < 3:
                raise Busy()
            return QueryResult(Answer.NOT_CREATED, "ORDER_NOT_EXIST")

        return with_retries(attempt, attempts=3, sleep=sleep)

    pulls = PullChannels(pace=pace)
    pulls.register("wechatpay", query, lambda order: None)
    result = pulls.query({"channel": "wechatpay", "mchid": "SUB1", "sp_mchid": "SP1", "out_trade_no": "A1"})
    assert result.word == "ORDER_NOT_EXIST" and len(calls) == 3
    assert asked == ["wechatpay#SP1"] * 3
    sleep(0.0)  # outside a call: a backoff takes no grant
    assert asked == ["wechatpay#SP1"] * 3
