"""R40: the queue groups rejected notifications by cause, so each refusal carries its own machine cause, named
by the channel's code where it refuses (errors.SignatureError.cause), never read back from the English reason
(a v3 body without its signature headers was once filed as "stale_timestamp": its reason names the Timestamp
header)."""

from __future__ import annotations

import time

import pytest
from tally import errors
from tally.channels.alipay import wire as ali
from tally.channels.alipay.merchant import alipay_credentials
from tally.channels.wechatpay_v2 import wire as v2
from tally.channels.wechatpay_v3 import wire as wx

from tally_local.simulator import ChannelSimulator


@pytest.fixture(scope="module")
def sim():
    return ChannelSimulator(fixed_keys=True)


def _cause(call) -> str:
    with pytest.raises(errors.SignatureError) as refused:
        call()
    assert refused.value.cause in errors.REJECTION_CAUSES
    return refused.value.cause


def test_r40_each_wechatpay_v3_refusal_has_its_own_cause(sim):
    m = sim.register_test_merchant()
    headers, body = sim.build_notification(m["mchid"], sim.transaction_resource(m["mchid"], "CAUSE-1", 100))
    good = {k.lower(): v for k, v in headers.items()}
    keys = wx.PlatformKeys.from_pems([], sim.public_key_pem, sim.public_key_id)
    now = time.time()

    def verify(**changed):
        return lambda: wx.verify_signed({**good, **changed}, body, keys, now)

    assert verify()() == good["wechatpay-serial"]  # the unchanged callback verifies
    missing = {k: v for k, v in good.items() if k != "wechatpay-signature"}
    assert _cause(lambda: wx.verify_signed(missing, body, keys, now)) == "missing_signature"
    assert _cause(verify(**{"wechatpay-timestamp": "1700000000"})) == "stale_timestamp"
    assert _cause(verify(**{"wechatpay-serial": "PUB_KEY_ID_0000"})) == "unknown_serial"
    assert (
        _cause(verify(**{"wechatpay-signature-type": "WECHATPAY2-SM2-WITH-SM3"})) == "unsupported_sign_type"
    )
    assert _cause(lambda: wx.verify_signed(good, body + b" ", keys, now)) == "bad_signature"


def test_r40_each_alipay_refusal_has_its_own_cause(sim):
    m = sim.alipay.register_test_merchant("public_key")
    params = sim.alipay.notification_params(m["app_id"], "CAUSE-2", 100)
    fields = ali.parse_form(sim.alipay.build_notification(params))
    creds = alipay_credentials(
        {
            "app_id": m["app_id"],
            "app_private_key": m["app_private_key_pem"],
            "alipay_public_key": m["alipay_public_key_pem"],
        },
        time.time(),
    )
    ali.verify_notification(fields, creds.keys)  # the unchanged callback verifies

    def verify(**changed):
        return lambda: ali.verify_notification({**fields, **changed}, creds.keys)

    unsigned = {k: v for k, v in fields.items() if k != "sign"}
    assert _cause(lambda: ali.verify_notification(unsigned, creds.keys)) == "missing_signature"
    assert _cause(verify(sign_type="RSA")) == "unsupported_sign_type"
    assert _cause(verify(total_amount="1000.00")) == "bad_signature"


def test_r40_each_wechatpay_v2_refusal_has_its_own_cause():
    params = {"appid": "wx0001", "mch_id": "1900000001", "out_trade_no": "CAUSE-3", "total_fee": "100"}
    signed = {**params, "sign": v2.sign(params, "k" * 32)}
    assert v2.verify(signed, "k" * 32) == "MD5"
    assert _cause(lambda: v2.verify(params, "k" * 32)) == "missing_signature"
    assert _cause(lambda: v2.verify({**signed, "sign_type": "RSA"}, "k" * 32)) == "unsupported_sign_type"
    assert _cause(lambda: v2.verify(signed, "x" * 32)) == "bad_signature"
    assert _cause(lambda: v2.decrypt_req_info("AAAAAAAAAAAAAAAAAAAAAA==", "k" * 32)) == "undecryptable"


def test_r40_no_service_code_reads_a_cause_out_of_a_reason():
    """The service layer takes the cause the channel named: no table of English substrings remains."""
    import inspect

    from tally.service import ingest

    source = inspect.getsource(ingest)
    assert "rejection_cause" not in source and '"does not verify"' not in source
