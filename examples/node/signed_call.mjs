// A merchant backend calling Tally's IAM-authorised API from Node 18+ (docs/deploy.md "Calling the API"):
// POST /orders signed with SigV4 for the service `execute-api` by the AWS SDK's own signer.
//     npm ci                       (in examples/node: @smithy/signature-v4 and @aws-crypto/sha256-js)
//     TALLY_API_URL=https://abc123.execute-api.us-east-1.amazonaws.com/ AWS_REGION=us-east-1 \
//       AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... [AWS_SESSION_TOKEN=...] node signed_call.mjs
// `make run`: TALLY_API_URL=http://127.0.0.1:3000 and the local key testing / testing.
// The body is signed as sent: send exactly the bytes that were signed.
import { Sha256 } from "@aws-crypto/sha256-js";
import { SignatureV4 } from "@smithy/signature-v4";

function fail(message) {
  console.error(`signed_call: ${message}`);
  process.exit(2);
}

const api = (process.env.TALLY_API_URL || "").replace(/\/+$/, "");
if (!api) fail("set TALLY_API_URL to the stack's API URL (make run: http://127.0.0.1:3000)");
const { AWS_ACCESS_KEY_ID: accessKeyId, AWS_SECRET_ACCESS_KEY: secretAccessKey } = process.env;
if (!accessKeyId || !secretAccessKey) {
  fail("no AWS credentials: give the backend's role keys in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY " +
    "(and AWS_SESSION_TOKEN); testing / testing for `make run`");
}
const url = new URL(`${api}/orders`);
const region = process.env.AWS_REGION || url.hostname.split(".")[2] || "us-east-1";
const order = JSON.parse(process.argv[2] || JSON.stringify({
  mchid: "1900000109", out_trade_no: "NODE000001", amount_cent: 1999, description: "coffee",
}));
const body = JSON.stringify(order);

const signer = new SignatureV4({
  service: "execute-api",
  region,
  sha256: Sha256,
  credentials: { accessKeyId, secretAccessKey, sessionToken: process.env.AWS_SESSION_TOKEN },
});
const signed = await signer.sign({
  method: "POST",
  protocol: url.protocol,
  hostname: url.hostname,
  port: url.port ? Number(url.port) : undefined,
  path: url.pathname,
  query: {},
  headers: { host: url.host, "content-type": "application/json" },
  body,
});
const { host, ...headers } = signed.headers; // fetch sets Host itself, from the URL signed above

const answer = await fetch(url, { method: "POST", headers, body });
const text = await answer.text();
console.log(answer.status, text);
// 201 created, 200 the same order posted again (a retry). Tally's errors are one body (docs/errors.md):
// {"error": {"code": "invalid_request", "message": "…", "errors": [{"field", "code", "message"}, …]}}
let error;
try { error = JSON.parse(text).error; } catch { error = undefined; } // API Gateway's own 403 is {"message"}
if (error && typeof error === "object") {
  console.error(`error ${error.code}: ${error.message}`);
  for (const field of error.errors || []) console.error(`  ${field.field}: ${field.code} (${field.message})`);
}
process.exit(answer.status === 200 || answer.status === 201 ? 0 : 1);
