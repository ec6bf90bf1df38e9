// A reference l0gc writer in Node 20: built-in fetch and node:crypto only, no npm packages.
// Built from docs/openapi.json and docs/integration.md alone (the contract): stamp from
// GET /v1/epoch, PUT the object to S3 (SigV4), fence, append to the "log", commit (retried:
// commits are idempotent, and name the object key the entry references: "objects"),
// abort when the append fails; follow a 307 only to a configured publisher or to a replica
// of the fleet (L0GC_FLEET); after a restart resume from last_applied_offset + 1.
//
//   node writer.mjs register       register L0GC_PARTITION (a new topic) with L0GC_REGISTRAR_TOKEN
//                                  (role registrar or admin; idempotent), print the answer
//   node writer.mjs write N        write N objects to L0GC_PARTITION, print one JSON per object
//   node writer.mjs reconcile O [L] [--entries OFFSET=KEY ...] [--objects KEY ...]
//                                  report the entries through offset O as reconciled (-1:
//                                  none yet); L: the log's last offset, read after an answer
//                                  that printed "log_end_wanted": true (only then), with
//                                  --entries: the key each log entry from that answer's
//                                  "references_from" through L names (a new owner after a
//                                  crash learns the keys of entries it never applied from
//                                  them); KEY ...: the keys this report lifted (only those
//                                  are released; a key of an entry through O not named stays
//                                  referenced). Without --objects every key of the entries
//                                  through O is released.
//
// Environment: L0GC_PUBLISHERS (comma-separated base URLs; the token is sent only there),
// L0GC_FLEET (optional, comma-separated SCHEME://HOST[:PORT] patterns, as
// `watermark serve --fleet-urls`: a 307 to a replica matching one is followed too, e.g.
// http://*.l0gc-publisher-peers.l0gc.svc.cluster.local:8080, the Helm chart's replicas),
// L0GC_TOKEN (writer), L0GC_RECONCILER_TOKEN, L0GC_REGISTRAR_TOKEN, L0GC_PARTITION, S3_ENDPOINT, S3_BUCKET,
// S3_REGION (default us-east-1), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, L0GC_ROOT
// (default level_zero/data).
import { createHash, createHmac, randomInt, randomUUID } from "node:crypto";

const env = process.env;
const PUBLISHERS = env.L0GC_PUBLISHERS.split(",").map((u) => new URL(u).origin);

// The fleet patterns: SCHEME://HOST[:PORT], HOST a DNS name whose "*" labels match any
// one label, an IPv4 address or CIDR network, or "*"; PORT a number, "*", or the scheme's
// default. A pattern that is none of these stops the writer (never guess at trust).
const DEFAULT_PORTS = { "http:": "80", "https:": "443" };
const ipv4 = (text) => /^\d{1,3}(\.\d{1,3}){3}$/.test(text)
  ? text.split(".").reduce((n, part) => n * 256 + Number(part), 0) : null;
const FLEET = (env.L0GC_FLEET ?? "").split(",").map((s) => s.trim()).filter(Boolean).map((text) => {
  const m = /^(https?):\/\/([A-Za-z0-9.\-*\/]+)(?::(\d{1,5}|\*))?$/.exec(text);
  if (!m) throw new Error(`L0GC_FLEET entry ${JSON.stringify(text)} is not SCHEME://HOST[:PORT]`);
  const [, scheme, host, port] = m;
  const [net, bits] = host.split("/");
  if (bits !== undefined && (ipv4(net) === null || !(Number(bits) <= 32))) {
    throw new Error(`L0GC_FLEET entry ${JSON.stringify(text)}: ${host} is not an IPv4 CIDR network`);
  }
  return { scheme: `${scheme}:`, host: host.toLowerCase(), net: ipv4(net), bits: Number(bits ?? 32),
    port: port ?? DEFAULT_PORTS[`${scheme}:`] };
});

function inFleet(origin) {
  const url = new URL(origin);
  const port = url.port || DEFAULT_PORTS[url.protocol];
  const host = url.hostname.toLowerCase();
  return FLEET.some((p) => {
    if (p.scheme !== url.protocol || (p.port !== "*" && p.port !== port)) return false;
    if (p.host === "*") return true;
    if (p.net !== null) {
      const ip = ipv4(host);
      const mask = p.bits === 0 ? 0 : (0xffffffff << (32 - p.bits)) >>> 0;
      return ip !== null && ((ip & mask) >>> 0) === ((p.net & mask) >>> 0);
    }
    const want = p.host.split("."), got = host.split(".");
    return want.length === got.length && want.every((label, i) => label === "*" || label === got[i]);
  });
}
const PARTITION = env.L0GC_PARTITION;
const ROOT = env.L0GC_ROOT ?? "level_zero/data";

// The error table (x-l0gc-error-codes of the OpenAPI document): what to do after each code.
const ACTIONS = {};

class ApiError extends Error {
  constructor(status, body) {
    super(`${status} ${body.error}: ${body.message}`);
    this.status = status;
    this.code = body.error;
    this.action = ACTIONS[body.error]?.action ?? (status >= 500 ? "retry" : "stop");
    this.body = body;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One request through retries and redirects. `pinned`: a fence token's publisher (commit,
// abort): never elsewhere. A 307 is followed only inside PUBLISHERS (never send the token
// to any other host). Fences are not retried after the request may have arrived.
async function call(method, path, { body, token, base, pinned = false, idempotent = true } = {}) {
  let target = base ?? PUBLISHERS[0];
  for (let attempt = 1; ; attempt++) {
    let response;
    try {
      response = await fetch(target + path, {
        method, redirect: "manual",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      const refused = error.cause?.code === "ECONNREFUSED";
      if ((!idempotent && !refused) || attempt >= 6) throw error;
      if (!pinned) target = PUBLISHERS[attempt % PUBLISHERS.length];
      await sleep(100 * 2 ** attempt);
      continue;
    }
    const text = await response.text();
    const doc = text ? JSON.parse(text) : {};
    if (response.status < 300) return { doc, base: target };
    if (response.status === 307 && !pinned) {
      const location = new URL(response.headers.get("location"), target).origin;
      if (!PUBLISHERS.includes(location) && !inFleet(location)) {
        throw new Error(`redirect to ${location} refused: not a configured publisher nor in L0GC_FLEET`);
      }
      target = location;
      continue;
    }
    const error = new ApiError(response.status, doc);
    if (error.action !== "retry" || attempt >= 6) throw error;
    const after = Number(response.headers.get("retry-after"));
    await sleep(after > 0 ? after * 1000 : 100 * 2 ** attempt);
  }
}

// --- S3 PUT with AWS Signature Version 4 (node:crypto) ------------------------------------
const sha256 = (data) => createHash("sha256").update(data).digest("hex");
const hmac = (key, data) => createHmac("sha256", key).update(data).digest();

async function s3Put(key, payload) {
  const region = env.S3_REGION ?? "us-east-1";
  const url = new URL(`${env.S3_ENDPOINT}/${env.S3_BUCKET}/${key.split("/").map(encodeURIComponent).join("/")}`);
  const now = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
  const day = now.slice(0, 8);
  const hash = sha256(payload);
  const headers = { host: url.host, "x-amz-content-sha256": hash, "x-amz-date": now };
  const names = Object.keys(headers).sort();
  const canonical = ["PUT", url.pathname, "", ...names.map((n) => `${n}:${headers[n]}`), "",
    names.join(";"), hash].join("\n");
  const scope = `${day}/${region}/s3/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", now, scope, sha256(canonical)].join("\n");
  let signingKey = hmac(`AWS4${env.AWS_SECRET_ACCESS_KEY}`, day);
  for (const part of [region, "s3", "aws4_request"]) signingKey = hmac(signingKey, part);
  const signature = createHmac("sha256", signingKey).update(toSign).digest("hex");
  const authorization = `AWS4-HMAC-SHA256 Credential=${env.AWS_ACCESS_KEY_ID}/${scope}, ` +
    `SignedHeaders=${names.join(";")}, Signature=${signature}`;
  const response = await fetch(url, { method: "PUT", body: payload,
    headers: { ...headers, Authorization: authorization } });
  if (!response.ok) throw new Error(`S3 PUT ${key}: ${response.status} ${await response.text()}`);
}

// --- the write protocol -------------------------------------------------------------------
const encoded = encodeURIComponent(PARTITION);

async function writeOne(offset) {
  for (;;) {
    // 1. the epoch to stamp: max(cluster epoch, created_epoch of the partition)
    const { doc: info } = await call("GET", "/v1/epoch", { token: env.L0GC_TOKEN });
    const hosted = info.partitions.find((p) => p.partition === PARTITION);
    const epoch = Math.max(info.epoch, hosted?.created_epoch ?? info.epoch);
    // 2. PUT {root}/{prefix:03d}/{epoch:018d}/{name}
    const key = `${ROOT}/${String(randomInt(1000)).padStart(3, "0")}/` +
      `${String(epoch).padStart(18, "0")}/${randomUUID()}`;
    await s3Put(key, `payload of offset ${offset}`);
    // 3. fence the epoch (never retried once it may have arrived: a lost grant holds the window)
    let fence;
    try {
      fence = await call("POST", `/v1/partitions/${encoded}/fence`,
        { body: { epoch }, token: env.L0GC_TOKEN, idempotent: false });
    } catch (error) {
      if (error.action === "reupload") continue; // stale_epoch / epoch_ahead: new key, new epoch
      throw error;
    }
    // 4. append to the log (here: the offset is the entry), then commit where it was granted,
    //    naming the object the entry references (the publisher holds it until the reconciler
    //    releases it; 429 references_full: too many held, the fence still is: retried);
    //    a commit whose answer is lost is simply sent again (idempotent: "repeat": true)
    const { doc: state } = await call("POST", `/v1/fences/${fence.doc.token}/commit`,
      { body: { offset, objects: [key] }, token: env.L0GC_TOKEN, base: fence.base, pinned: true });
    return { key, epoch, offset, repeat: state.repeat, references: state.references };
  }
}

async function main() {
  const { doc: openapi } = await call("GET", "/v1/openapi.json", { token: env.L0GC_TOKEN });
  Object.assign(ACTIONS, openapi["x-l0gc-error-codes"]);
  const [command, argument] = process.argv.slice(2);
  if (command === "register") {
    // a new partition: registered over HTTP (no etcd credentials, no publisher restart);
    // "hosted": true means the publisher serves it now, so fence it straight away
    const { doc } = await call("POST", `/v1/partitions/${encoded}/register`,
      { token: env.L0GC_REGISTRAR_TOKEN });
    console.log(JSON.stringify({ partition: doc.partition, registered: doc.registered,
      hosted: doc.hosted, watermark: doc.record.watermark }));
  } else if (command === "write") {
    // restart and resume: continue after the last offset the publisher applied
    const { doc: state } = await call("GET", `/v1/partitions/${encoded}`, { token: env.L0GC_TOKEN });
    let offset = (state.last_applied_offset ?? -1) + 1;
    for (let i = 0; i < Number(argument); i++) {
      console.log(JSON.stringify(await writeOne(offset)));
      offset += 1;
    }
  } else if (command === "reconcile") {
    const rest = process.argv.slice(4);
    const flag = (name) => { // the arguments after `name`, up to the next flag
      const at = rest.indexOf(name);
      if (at < 0) return undefined;
      const next = rest.findIndex((arg, i) => i > at && arg.startsWith("--"));
      return rest.slice(at + 1, next < 0 ? undefined : next);
    };
    const firstFlag = rest.findIndex((arg) => arg.startsWith("--"));
    const [logEnd] = firstFlag < 0 ? rest : rest.slice(0, firstFlag);
    const body = { offset: Number(argument) };
    if (logEnd !== undefined) body.log_end_offset = Number(logEnd);
    // with the log end, the key each entry names: {offsets, keys}, offsets rising
    const entries = flag("--entries");
    if (entries !== undefined) {
      const pairs = entries.map((e) => [Number(e.slice(0, e.indexOf("="))), e.slice(e.indexOf("=") + 1)])
        .sort((a, b) => a[0] - b[0]);
      body.log_references = { offsets: pairs.map((p) => p[0]), keys: pairs.map((p) => p[1]) };
    }
    // the keys this report lifted: the publisher releases only those, so an entry passed
    // whose object was not lifted stays referenced (and a sweeper will not delete it)
    const lifted = flag("--objects");
    if (lifted !== undefined) body.objects = lifted;
    const { doc } = await call("POST", `/v1/partitions/${encoded}/reconciled`,
      { body, token: env.L0GC_RECONCILER_TOKEN });
    console.log(JSON.stringify({ reconciled_offset: doc.reconciled_offset, watermark: doc.watermark,
      log_end_wanted: doc.log_end_wanted, references_from: doc.references_from,
      references: doc.references }));
  } else {
    throw new Error(
      "usage: node writer.mjs register | write N | " +
      "reconcile OFFSET [LOG_END] [--entries OFFSET=KEY ...] [--objects KEY ...]");
  }
}

main().catch((error) => {
  // a code with action "stop" (not_registered: a mistyped L0GC_PARTITION, ...) ends here at once
  console.error(`writer: ${error.message}${error.action ? ` (action: ${error.action})` : ""}`);
  process.exit(1);
});
