"""The web console of the admin HTTP endpoint: one page, no build step, no login (the endpoint
is read-only and binds to 127.0.0.1 unless told otherwise).

The page is plain HTML with a little JavaScript that reads the endpoint's JSON routes
(`/v1/brokers`, `/v1/topics`, `/v1/groups`) and redraws every `REFRESH_MS` (or `?refresh=MS`;
0 stops it):

- a summary: brokers, topics, partitions, bytes on local disk and in the bucket, upload lag;
- the cluster's brokers, as the metadata store has them: address, rack, alive or not, which
  one is the controller and which one serves the page, and the partitions each leads;
- topics with their partitions' two tiers: per partition a bar over the offsets from the log
  start to the log end, showing which are only in the bucket, in the bucket and still on local
  disk, and only on local disk (of which the rolled segments waiting for the bucket), and under
  it a thin strip of durability: the offsets held in write-ahead objects and those appended but
  not yet durable (above the high watermark); with the offsets, segments, bytes, write-ahead
  objects and upload lag as numbers; a topic's configs under it;
- consumer groups with their committed offset, the high watermark and the lag per partition;
  and each group's state and members (member id, client id, host and assigned partitions).

Every figure comes from the leaders through the JSON routes, so the page shows what
`/metrics` shows. Text from the broker is put in with `textContent`, never parsed as HTML.
Elements carry `data-*` attributes with the raw numbers, for scripts and tests.

The page lives here as a string so the package needs no data files.
"""

from __future__ import annotations

REFRESH_MS = 2000

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Diskless console</title>
<style>
  :root { --bucket: #4c78a8; --both: #72b7b2; --waiting: #f58518; --local: #e45756; --wal: #9467bd; --pending: #bab0ac;
          --ink: #222; --muted: #666; }
  body { font: 14px/1.4 system-ui, sans-serif; color: var(--ink); margin: 0; }
  header { background: #1f2933; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .figure { color: #cbd2d9; } header .figure b { color: #fff; }
  main { padding: 10px 20px 40px; max-width: 1400px; }
  h2 { font-size: 16px; margin: 22px 0 8px; }
  table { border-collapse: collapse; width: 100%; margin-bottom: 8px; }
  th, td { text-align: right; padding: 3px 8px; border-bottom: 1px solid #e4e7eb; white-space: nowrap; }
  th:first-child, td:first-child, td.text, th.text { text-align: left; }
  th { font-weight: 600; color: var(--muted); font-size: 12px; }
  tr.topic td:first-child a { font-weight: 600; cursor: pointer; color: #0b4f8a; text-decoration: none; }
  .bar { display: flex; width: 320px; height: 14px; background: #f0f2f5; border-radius: 2px; overflow: hidden; }
  .bar span { display: block; height: 100%; }
  .bar .bucket { background: var(--bucket); } .bar .both { background: var(--both); }
  .bar .waiting { background: var(--waiting); } .bar .local { background: var(--local); }
  .walbar { display: flex; width: 320px; height: 4px; margin-top: 1px; background: #f0f2f5; }
  .walbar span { display: block; height: 100%; }
  .walbar .wal { background: var(--wal); } .walbar .pending { background: var(--pending); }
  td.wrap { white-space: normal; text-align: left; max-width: 640px; }
  table.partitions th { white-space: normal; vertical-align: bottom; }
  .legend span { display: inline-block; margin-right: 14px; color: var(--muted); font-size: 12px; }
  .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
  .configs { color: var(--muted); font-size: 12px; margin: 4px 0 10px; }
  .detail { background: #fafbfc; }
  .lagging { color: #c0392b; font-weight: 600; }
  #error { color: #c0392b; }
  .muted { color: var(--muted); }
</style>
</head>
<body>
<header>
  <h1>Diskless</h1>
  <span class="figure">brokers <b id="summary-brokers">-</b></span>
  <span class="figure">topics <b id="summary-topics">-</b></span>
  <span class="figure">partitions <b id="summary-partitions">-</b></span>
  <span class="figure">local <b id="summary-local-bytes">-</b></span>
  <span class="figure">bucket <b id="summary-remote-bytes">-</b></span>
  <span class="figure">upload lag <b id="summary-upload-lag">-</b></span>
  <span class="figure">groups <b id="summary-groups">-</b></span>
  <span class="figure muted" id="refreshed"></span>
  <span id="error"></span>
</header>
<main>
  <h2>Brokers</h2>
  <table id="brokers">
    <thead><tr>
      <th>node</th><th class="text">address</th><th class="text">rack</th><th class="text">state</th><th class="text">role</th>
      <th>leaderships</th><th class="text">leads</th>
    </tr></thead>
    <tbody></tbody>
  </table>
  <h2>Topics</h2>
  <div class="legend">
    <span><i style="background:var(--bucket)"></i>bucket only</span>
    <span><i style="background:var(--both)"></i>bucket and local disk</span>
    <span><i style="background:var(--waiting)"></i>local, waiting for upload</span>
    <span><i style="background:var(--local)"></i>local only</span>
    <span><i style="background:var(--wal)"></i>in write-ahead objects (thin strip)</span>
    <span><i style="background:var(--pending)"></i>not yet durable (thin strip)</span>
  </div>
  <table id="topics">
    <thead><tr>
      <th class="text">topic</th><th>partitions</th><th>messages</th><th>local segments</th><th>local bytes</th>
      <th>bucket segments</th><th>bucket bytes</th><th>upload lag (segments)</th><th>upload lag (bytes)</th>
    </tr></thead>
    <tbody></tbody>
  </table>
  <h2>Consumer groups</h2>
  <table id="groups">
    <thead><tr>
      <th class="text">group</th><th class="text">topic</th><th>partition</th><th>committed offset</th>
      <th>high watermark</th><th>lag</th>
    </tr></thead>
    <tbody></tbody>
  </table>
  <h2>Group members</h2>
  <table id="members">
    <thead><tr>
      <th class="text">group</th><th class="text">state</th><th class="text">member</th><th class="text">client id</th>
      <th class="text">host</th><th class="text">assigned partitions</th>
    </tr></thead>
    <tbody></tbody>
  </table>
</main>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const refreshMs = params.has("refresh") ? Number(params.get("refresh")) : __REFRESH_MS__;
const open = new Set((location.hash.match(/topic=([^&]+)/) || [, ""])[1].split(",").filter(Boolean).map(decodeURIComponent));

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
}
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}
function num(field, value, text) {
  return el("td", {"data-field": field, "data-value": String(value)}, text === undefined ? String(value) : text);
}
function sum(items, key) { return items.reduce((a, p) => a + p[key], 0); }

// The partition's offsets [log start, log end) split by where they live.
function ranges(p) {
  const start = p.log_start_offset, end = p.log_end_offset, remoteEnd = Math.max(p.remote_end_offset, start);
  const localStart = Math.max(p.local_log_start_offset, start);
  const activeBase = Math.max(p.active_base_offset, localStart);
  return [
    ["bucket", start, Math.min(remoteEnd, localStart)],
    ["both", localStart, Math.min(remoteEnd, end)],
    ["waiting", Math.max(remoteEnd, localStart), activeBase],
    ["local", Math.max(remoteEnd, activeBase, localStart), end],
  ].map(([kind, from, to]) => [kind, from, Math.max(from, to)]);
}
// Durability: offsets [from, to) in write-ahead objects, and those not yet durable.
function durability(p) {
  const start = p.log_start_offset, end = p.log_end_offset;
  const wal = p.wal_start_offset === null ? [] : [["wal", Math.max(p.wal_start_offset, start), Math.min(p.wal_end_offset, end)]];
  return [...wal, ["pending", Math.max(p.high_watermark, start), end]];
}
function tierBar(p) {
  const node = el("div", {"class": "bar", "data-field": "bar"});
  const span = Math.max(1, p.log_end_offset - p.log_start_offset);
  for (const [kind, from, to] of ranges(p)) {
    if (to <= from) continue;
    node.append(el("span", {"class": kind, "data-from": String(from), "data-to": String(to),
      "style": "width:" + (100 * (to - from) / span) + "%", "title": kind + ": offsets " + from + " to " + (to - 1)}));
  }
  return node;
}
function bar(p) {
  return el("div", {}, tierBar(p), walStrip(p));
}
function walStrip(p) {
  // Positioned by offset: a gap before the write-ahead range (offsets only in segments) stays empty.
  const node = el("div", {"class": "walbar", "data-field": "walbar"});
  const span = Math.max(1, p.log_end_offset - p.log_start_offset);
  let at = p.log_start_offset;
  for (const [kind, from, to] of durability(p)) {
    if (to <= from) continue;
    if (from > at) node.append(el("span", {"style": "width:" + (100 * (from - at) / span) + "%"}));
    node.append(el("span", {"class": kind, "data-from": String(from), "data-to": String(to),
      "style": "width:" + (100 * (to - from) / span) + "%", "title": (kind === "wal" ? "in write-ahead objects" : "not yet durable")
        + ": offsets " + from + " to " + (to - 1)}));
    at = to;
  }
  return node;
}

function topicRows(t) {
  const ps = t.partitions;
  const messages = ps.reduce((a, p) => a + p.high_watermark - p.log_start_offset, 0);
  const link = el("a", {"href": "#topic=" + encodeURIComponent(t.topic)}, t.topic);
  link.addEventListener("click", (e) => {
    e.preventDefault();
    open.has(t.topic) ? open.delete(t.topic) : open.add(t.topic);
    history.replaceState(null, "", "#topic=" + [...open].map(encodeURIComponent).join(","));
    render();
  });
  const rows = [el("tr", {"class": "topic", "data-topic": t.topic},
    el("td", {"data-field": "topic"}, link),
    num("partitions", ps.length), num("messages", messages),
    num("local_segments", sum(ps, "local_segments")), num("local_bytes", sum(ps, "local_bytes"), bytes(sum(ps, "local_bytes"))),
    num("remote_segments", sum(ps, "remote_segments")), num("remote_bytes", sum(ps, "remote_bytes"), bytes(sum(ps, "remote_bytes"))),
    num("upload_lag_segments", sum(ps, "upload_lag_segments")),
    num("upload_lag_bytes", sum(ps, "upload_lag_bytes"), bytes(sum(ps, "upload_lag_bytes"))))];
  if (!open.has(t.topic)) return rows;
  const configs = Object.entries(t.configs).sort().map(([k, v]) => k + "=" + v).join("  ") || "(defaults)";
  const table = el("table", {"class": "partitions", "data-topic": t.topic},
    el("thead", {}, el("tr", {}, ...["partition", "tiers", "log start", "local log start", "bucket end", "high watermark",
      "log end", "local segments", "local bytes", "bucket segments", "bucket bytes", "upload lag (segments)",
      "upload lag (bytes)", "write-ahead objects", "write-ahead bytes"].map((h, i) => el("th", i < 2 ? {"class": "text"} : {}, h)))));
  const body = el("tbody");
  for (const p of ps) {
    body.append(el("tr", {"data-partition": String(p.partition)},
      num("partition", p.partition), el("td", {"class": "text"}, bar(p)),
      num("log_start_offset", p.log_start_offset), num("local_log_start_offset", p.local_log_start_offset),
      num("remote_end_offset", p.remote_end_offset), num("high_watermark", p.high_watermark),
      num("log_end_offset", p.log_end_offset), num("local_segments", p.local_segments),
      num("local_bytes", p.local_bytes, bytes(p.local_bytes)), num("remote_segments", p.remote_segments),
      num("remote_bytes", p.remote_bytes, bytes(p.remote_bytes)), num("upload_lag_segments", p.upload_lag_segments),
      num("upload_lag_bytes", p.upload_lag_bytes, bytes(p.upload_lag_bytes)), num("wal_objects", p.wal_objects),
      num("wal_bytes", p.wal_bytes, bytes(p.wal_bytes))));
  }
  table.append(body);
  rows.push(el("tr", {"class": "detail", "data-detail": t.topic},
    el("td", {"colspan": "9", "class": "text"}, el("div", {"class": "configs", "data-field": "configs"}, configs), table)));
  return rows;
}

// "orders: 0, 1, 2; audit: 0": the partitions a broker leads, by topic.
function leads(leaderships) {
  const byTopic = new Map();
  for (const l of leaderships) byTopic.set(l.topic, [...(byTopic.get(l.topic) || []), l.partition]);
  return [...byTopic].map(([topic, ps]) => topic + ": " + ps.sort((a, b) => a - b).join(", ")).join("; ") || "-";
}
function brokerRows(cluster) {
  return cluster.brokers.map((b) => el("tr", {"data-broker": String(b.node_id)},
    num("node_id", b.node_id),
    el("td", {"class": "text", "data-field": "address"}, b.host + ":" + b.port),
    el("td", {"class": "text", "data-field": "rack"}, b.rack === null ? "-" : b.rack),
    Object.assign(el("td", {"class": "text", "data-field": "state"}, b.alive ? "alive" : "session expired"),
      {className: b.alive ? "text" : "text lagging"}),
    el("td", {"class": "text", "data-field": "role"},
      [b.controller ? "controller" : "", b.node_id === cluster.node_id ? "this broker" : ""].filter(Boolean).join(", ") || "-"),
    num("leaderships", b.leaderships.length),
    el("td", {"class": "wrap", "data-field": "leads",
      "data-value": b.leaderships.map((l) => l.topic + "-" + l.partition).sort().join(",")}, leads(b.leaderships))));
}

function groupRows(g) {
  return g.partitions.map((p, i) => el("tr", {"data-group": g.group_id, "data-topic": p.topic, "data-partition": String(p.partition)},
    el("td", {"data-field": "group"}, i === 0 ? g.group_id : ""), el("td", {"class": "text", "data-field": "topic"}, p.topic),
    num("partition", p.partition),
    p.committed_offset === null ? el("td", {"data-field": "committed_offset"}, "-") : num("committed_offset", p.committed_offset),
    p.high_watermark === null ? el("td", {"data-field": "high_watermark"}, "-") : num("high_watermark", p.high_watermark),
    p.lag === null ? el("td", {"data-field": "lag"}, "-")
      : Object.assign(num("lag", p.lag), {className: p.lag > 0 ? "lagging" : ""})));
}
function memberRows(g) {
  const state = g.state === null ? "-" : g.state + (g.type ? " (" + g.type + ")" : "");
  if (g.members.length === 0) {
    return g.state === null ? [] : [el("tr", {"data-group": g.group_id},
      el("td", {"data-field": "group"}, g.group_id), el("td", {"class": "text", "data-field": "state"}, state),
      el("td", {"class": "text muted", "colspan": "4"}, "no active members"))];
  }
  return g.members.map((m, i) => el("tr", {"data-group": g.group_id, "data-member": m.member_id},
    el("td", {"data-field": "group"}, i === 0 ? g.group_id : ""),
    el("td", {"class": "text", "data-field": "state"}, i === 0 ? state : ""),
    el("td", {"class": "text", "data-field": "member_id"}, m.member_id),
    el("td", {"class": "text", "data-field": "client_id"}, m.client_id),
    el("td", {"class": "text", "data-field": "client_host"}, m.client_host),
    el("td", {"class": "text", "data-field": "assignment", "data-value": m.assignment.map((a) => a.topic + "-" + a.partition).join(",")},
      m.assignment.map((a) => a.topic + "-" + a.partition).join(", ") || "(none)")));
}

let last = null;
function render() {
  if (last === null) return;
  const [cluster, topics, groups] = last;
  const ps = topics.topics.flatMap((t) => t.partitions);
  const alive = cluster.brokers.filter((b) => b.alive).length;
  document.getElementById("summary-brokers").textContent =
    alive === cluster.brokers.length ? String(alive) : alive + " of " + cluster.brokers.length + " alive";
  document.getElementById("summary-topics").textContent = String(topics.topics.length);
  document.getElementById("summary-partitions").textContent = String(ps.length);
  document.getElementById("summary-local-bytes").textContent = bytes(sum(ps, "local_bytes"));
  document.getElementById("summary-remote-bytes").textContent = bytes(sum(ps, "remote_bytes"));
  document.getElementById("summary-upload-lag").textContent =
    sum(ps, "upload_lag_segments") + " segments, " + bytes(sum(ps, "upload_lag_bytes"));
  document.getElementById("summary-groups").textContent = String(groups.groups.length);
  document.querySelector("#brokers tbody").replaceChildren(...brokerRows(cluster));
  document.querySelector("#topics tbody").replaceChildren(...topics.topics.flatMap(topicRows));
  document.querySelector("#groups tbody").replaceChildren(...groups.groups.flatMap(groupRows));
  document.querySelector("#members tbody").replaceChildren(...groups.groups.flatMap(memberRows));
}

async function refresh() {
  try {
    const answers = await Promise.all(["/v1/brokers", "/v1/topics", "/v1/groups"].map(async (path) => {
      const response = await fetch(path, {cache: "no-store"});
      if (!response.ok) throw new Error(path + ": HTTP " + response.status);
      return response.json();
    }));
    last = answers;
    render();
    document.getElementById("error").textContent = "";
    document.getElementById("refreshed").textContent = "refreshed " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the broker: " + e.message;
  }
  if (refreshMs > 0) setTimeout(refresh, refreshMs);
}
refresh();
</script>
</body>
</html>
""".replace("__REFRESH_MS__", str(REFRESH_MS))
