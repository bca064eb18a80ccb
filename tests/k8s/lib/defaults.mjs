// defaults.mjs: the numbers the manifests must agree with, read from where
// corral itself keeps them, so they are written down once:
//   the gateway's default port      services/gateway/access.c (defport)
//   the drain timeout's default     services/*/main.c (CORRAL_DRAIN_TIMEOUT)
//   the node agents' port           docs/deploy.md, CORRAL_NODES_ENDPOINT row
//   the ports of each k8s Service   docs/deploy.md, "Running on Kubernetes"
import { readFileSync } from "node:fs";
import { join } from "node:path";

function must(m, what) {
  if (!m) throw new Error(`tests/k8s: cannot find ${what}`);
  return m;
}

export function readDefaults(srcDir) {
  const read = (p) => readFileSync(join(srcDir, p), "utf8");
  const access = read("services/gateway/access.c");
  const gatewayPort = Number(must(/unsigned defport = (\d+);/.exec(access), "defport in access.c")[1]);

  let drainMs = 0;
  for (const svc of ["gateway", "scheduler"]) {
    const m = must(/cr_env_duration_ms\("DRAIN_TIMEOUT", (\d+) \* 1000\)/.exec(read(`services/${svc}/main.c`)),
      `the DRAIN_TIMEOUT default in services/${svc}/main.c`);
    drainMs = Math.max(drainMs, Number(m[1]) * 1000);
  }

  const deploy = read("docs/deploy.md");
  const nodesRow = must(/^\| scheduler, for node agents.*tcp:\/\/[^:`]+:(\d+)`/m.exec(deploy),
    "the CORRAL_NODES_ENDPOINT example port in docs/deploy.md");
  const nodesPort = Number(nodesRow[1]);

  const section = must(/^## Running on Kubernetes\n([\s\S]*?)(?=^## )/m.exec(deploy + "\n## end"),
    'the section "Running on Kubernetes" in docs/deploy.md')[1];
  const servicePorts = [];
  for (const m of section.matchAll(/^\| (\d+) \| `(corral-[a-z]+)` `([a-z]+)` \|/gm))
    servicePorts.push({ port: Number(m[1]), service: m[2], name: m[3] });
  if (!servicePorts.length) throw new Error("tests/k8s: no port table in docs/deploy.md's Kubernetes section");
  return { gatewayPort, drainMs, nodesPort, servicePorts };
}

// A Go-style duration ("30s", "1m30s", "500ms") or plain seconds, as
// lib/duration.c reads CORRAL_DRAIN_TIMEOUT; in ms.
export function parseDurationMs(s) {
  const v = String(s).trim();
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v) * 1000;
  const unit = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
  let ms = 0;
  let rest = v;
  while (rest) {
    const m = /^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/.exec(rest);
    if (!m) throw new Error(`not a duration: '${s}'`);
    ms += Number(m[1]) * unit[m[2]];
    rest = rest.slice(m[0].length);
  }
  return ms;
}

// A Kubernetes quantity ("250m", "2", "512Mi", "200Gi", "1e3") as a number
// of base units.
export function parseQuantity(q) {
  const m = /^([0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$/.exec(String(q).trim());
  if (!m) throw new Error(`not a quantity: '${q}'`);
  const mult = {
    m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
  };
  const s = m[2];
  if (s && s.startsWith("e")) return Number(m[1]) * 10 ** Number(s.slice(1));
  return Number(m[1]) * (s ? mult[s] : 1);
}

// A size as lib/size.c reads CORRAL_NODE_CACHE_MAX: bytes, or KB/MB/GB/TB
// (powers of 1000) and KiB/MiB/GiB/TiB (of 1024).
export function parseCorralSize(s) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$/i.exec(String(s));
  if (!m) throw new Error(`not a size: '${s}'`);
  const u = (m[2] ?? "B").toLowerCase();
  const mult = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30, tib: 2 ** 40 };
  return Number(m[1]) * mult[u];
}
