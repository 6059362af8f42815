// A merchant's webhook receiver for Tally (docs/webhooks.md), Node 18+ with no dependency: verifies the Standard
// Webhooks signature over the raw body, refuses stale timestamps, drops a second copy by its id, prints each event.
//     WEBHOOK_SECRET=whsec_... node examples/webhook_receiver.mjs 8080     (port 0: any free port)
// The npm package `standardwebhooks` does the same check: new Webhook(secret).verify(body, headers).
import { createServer } from "node:http";
import { createHmac, timingSafeEqual } from "node:crypto";

const key = Buffer.from(process.env.WEBHOOK_SECRET.replace(/^whsec_/, ""), "base64");
const seen = new Set(); // a real receiver keeps the ids it processed in its own database
const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const id = req.headers["webhook-id"], ts = req.headers["webhook-timestamp"];
    const mac = createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest("base64");
    const expected = Buffer.from(`v1,${mac}`);
    const signed = (req.headers["webhook-signature"] || "").split(" ").map((s) => Buffer.from(s))
      .some((s) => s.length === expected.length && timingSafeEqual(s, expected));
    if (!signed || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return res.writeHead(401).end();
    if (!seen.has(id)) { seen.add(id); console.log(body.toString("utf8")); } // at-least-once: copies ignored
    res.writeHead(200).end();
  });
});
server.listen(Number(process.argv[2] || 0), "127.0.0.1", () => console.log(`listening ${server.address().port}`));
