"""A merchant's webhook receiver for Tally (docs/webhooks.md): verifies the Standard Webhooks signature over the
raw body, refuses stale timestamps, drops a second copy by its id, prints each event as one JSON line.

    WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py 8080     (port 0: any free port)
"""

import base64, hashlib, hmac, json, os, sys, time  # noqa: E401 - a receiver that fits on one screen
from http.server import BaseHTTPRequestHandler, HTTPServer

KEY = base64.b64decode(os.environ["WEBHOOK_SECRET"].removeprefix("whsec_"))
SEEN = set()  # a real receiver keeps the ids it processed in its own database


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["content-length"]))
        msg_id, ts = self.headers["webhook-id"], self.headers["webhook-timestamp"]
        mac = hmac.new(KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
        expected = "v1," + base64.b64encode(mac).decode()
        signed = any(hmac.compare_digest(expected, s) for s in self.headers["webhook-signature"].split())
        if not signed or abs(time.time() - int(ts)) > 300:
            self.send_response(401)
        else:
            if msg_id not in SEEN:  # at-least-once delivery: a copy is answered 200 and ignored
                SEEN.add(msg_id)
                print(json.dumps(json.loads(body), ensure_ascii=False), flush=True)
            self.send_response(200)
        self.end_headers()


server = HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Receiver)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
