"""The Alipay bill download client against a stub gateway on 127.0.0.1: RSA2 request signing, the signed
answer verified over its raw text, isp.bill_not_exist as "no statement", a forged answer refused."""

import json
import pathlib
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import serialization
from tally.channels import bills_alipay as ali

ZIP = next((pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills").glob("alipay_*.zip")).read_bytes()
KEYS = pathlib.Path(__file__).resolve().parents[2] / "tally_local/simulator/testkeys"  # TEST-ONLY keys, reused
APP = serialization.load_pem_private_key((KEYS / "merchant_key.pem").read_bytes(), password=None)
ALIPAY = serialization.load_pem_private_key((KEYS / "platform_key.pem").read_bytes(), password=None)


@pytest.fixture
def gateway():
    state = {"node": None, "forge": False, "seen": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_GET(self):  # noqa: N802
            parts = urllib.parse.urlsplit(self.path)
            if parts.path == "/bill.zip":
                body, kind = ZIP, "application/zip"
            else:
                params = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
                state["seen"].append(params)
                assert ali.rsa2_verify(APP.public_key(), ali.sign_content(params), params["sign"])
                node = json.dumps(state["node"], separators=(",", ":"), ensure_ascii=False)
                sign = ali.rsa2_sign(ALIPAY if not state["forge"] else APP, node)
                body = f'{{"alipay_data_dataservice_bill_downloadurl_query_response":{node},"sign":"{sign}"}}'.encode()
                kind = "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    state["url"] = url
    yield state
    server.shutdown()


def client(gateway):
    return ali.AlipayBillClient(gateway["url"] + "/gateway.do", "2021000000000001", APP, ALIPAY.public_key())


def test_download_url_signed_verified_and_the_zip_parses(gateway):
    gateway["node"] = {"code": "10000", "msg": "Success", "bill_download_url": gateway["url"] + "/bill.zip"}
    c = client(gateway)
    url = c.download_url("2024-05-01")
    assert url.endswith("/bill.zip")
    (seen,) = gateway["seen"]
    assert seen["method"] == ali.METHOD and json.loads(seen["biz_content"]) == {"bill_type": "trade",
                                                                                  "bill_date": "2024-05-01"}
    files = ali.open_zip(c.download(url))
    assert ali.AlipayBillParser(ali.lines_of(files.detail)).scan().rows == 3


def test_no_bill_is_none_and_a_forged_answer_is_refused(gateway):
    gateway["node"] = {"code": "40004", "msg": "Business Failed", "sub_code": "isp.bill_not_exist", "sub_msg": "账单不存在"}
    assert client(gateway).download_url("2024-05-01") is None
    gateway["forge"] = True
    with pytest.raises(ali.AlipayError, match="signature"):
        client(gateway).download_url("2024-05-01")
