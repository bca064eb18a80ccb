// pods.mjs: the rendered base run as pods on this machine, without a
// cluster: each workload's container becomes a process in its own mount
// and PID namespace, chrooted into a root built as the image would be
// (the build installed into /usr/local, the host's /usr and /etc for the
// Debian libraries), with that root read-only and only the pod's volumes
// writable: emptyDirs as tmpfs (mode 0777, as the kubelet makes them),
// the registry's claim as a directory the scheduler mounts read-only,
// Secrets and ConfigMaps in the kubelet's layout (..data symlinks, the
// manifest's modes). Each runs as the manifest's uid/gid with no
// capabilities and no_new_privs, with exactly the environment the
// manifests give it (image ENV, envFrom, env, fieldRef spec.nodeName).
// The only addition: the node pod describes one GPU (CORRAL_GPU_INVENTORY),
// as no GPU is here. All pods share one network namespace (pods.sh makes
// it), where /etc/hosts names the Services.
//
// Then, as a cluster would: the readiness probes of the manifests are run
// until each pod is ready, a model is created through the gateway with the
// API key from the Secret, answered by a runner on the node agent (its
// blob fetched over CURVE with the keys from the Secrets); the scheduler
// pod is killed and replaced and the node's runner adopted; then replaced
// gracefully (SIGTERM), which stops the runners; and every pod stops on
// SIGTERM within its grace period.
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, symlinkSync, writeFileSync, openSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { render } from "../lib/kustomize.mjs";
import { envOf, workloads } from "../lib/rules.mjs";
import { podSpecOf } from "../lib/kustomize.mjs";
import { SOURCE_DIR, preparedCopy } from "../lib/fixture.mjs";

const BUILD = process.env.CORRAL_BUILD_DIR;
const NODE_NAME = "gpu-node-1";
const IMAGE_ENV = { // deploy/docker/Dockerfile's ENV and its USER's passwd entry
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  HOME: "/var/lib/corral",
  CORRAL_RUNTIME_DIR: "/run/corral/bus",
  CORRAL_MODELS: "/var/lib/corral/models",
  CORRAL_HOST: "0.0.0.0:11434",
};

let passed = 0;
let failed = 0;
const ok = (m) => { passed++; console.log(`ok: ${m}`); };
const bad = (m) => { failed++; console.log(`FAIL: ${m}`); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, ms = 60000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    try { const v = await fn(); if (v) return v; } catch { /* not yet */ }
    await sleep(100);
  }
  return null;
}

const fx = preparedCopy();
if (!fx.keygen) { console.log("pods: skipped: no corral-node in CORRAL_BUILD_DIR"); process.exit(77); }
const T = join(fx.dir, "..");
const objs = render(join(fx.dir, "base"));
const find = (kind, name) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const byComponent = (c) => workloads(objs).find((w) => w.spec.template.metadata.labels["app.kubernetes.io/component"] === c);

// The image: the build's runtime component under /usr/local, as the
// Dockerfile's build stage installs it, plus its healthcheck.
const INST = join(T, "inst");
execFileSync("cmake", ["--install", BUILD, "--component", "runtime", "--prefix", "/usr/local"],
  { env: { ...process.env, DESTDIR: INST }, stdio: "ignore" });
mkdirSync(join(INST, "usr/local/lib/corral"), { recursive: true });
cpSync(join(SOURCE_DIR, "deploy/docker/healthcheck.sh"), join(INST, "usr/local/lib/corral/healthcheck"));
chmodSync(join(INST, "usr/local/lib/corral/healthcheck"), 0o755);

// Claims: one directory per claim name, owned by the pods' fsGroup.
const CLAIMS = join(T, "claims");

function kubeletVolume(dir, files, mode, gid) {
  // The kubelet's atomic writer: files in a timestamped dir, ..data
  // pointing at it, and each key a symlink through ..data.
  const ts = "..2026_01_01_00_00_00.000000000";
  mkdirSync(join(dir, ts), { recursive: true });
  for (const [k, bytes] of Object.entries(files)) {
    writeFileSync(join(dir, ts, k), bytes);
    chmodSync(join(dir, ts, k), mode);
    if (gid !== undefined) chownSync(join(dir, ts, k), 0, gid);
    symlinkSync(`..data/${k}`, join(dir, k));
  }
  symlinkSync(ts, join(dir, "..data"));
}

function sq(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}

// The shell script that builds a pod's root and execs its container.
function podScript(w, tag, extraEnv) {
  const pod = podSpecOf(w);
  const c = pod.containers[0];
  const P = join(T, "pods", tag);
  const R = join(P, "root");
  mkdirSync(R, { recursive: true });
  const uid = c.securityContext?.runAsUser ?? pod.securityContext.runAsUser;
  const gid = c.securityContext?.runAsGroup ?? pod.securityContext.runAsGroup;
  const fsGroup = pod.securityContext.fsGroup;
  const env = { ...IMAGE_ENV, ...envOf(objs, c) };
  for (const ef of c.envFrom ?? [])
    if (ef.secretRef)
      for (const [k, v] of Object.entries(find("Secret", ef.secretRef.name).data))
        env[k] = Buffer.from(v, "base64").toString();
  for (const e of c.env ?? [])
    if (e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName") env[e.name] = NODE_NAME;
  Object.assign(env, extraEnv);
  const lines = [
    "set -e",
    `R=${sq(R)}`,
    "mount --make-rprivate /",
    "mount -t tmpfs -o mode=755 tmpfs \"$R\"",
    "for d in bin sbin lib lib32 lib64 libx32; do",
    "  if [ -L /$d ]; then ln -s \"$(readlink /$d)\" \"$R/$d\";",
    "  elif [ -d /$d ]; then mkdir \"$R/$d\"; mount --bind /$d \"$R/$d\"; mount -o remount,bind,ro \"$R/$d\"; fi",
    "done",
    "mkdir \"$R/usr\" && mount --rbind /usr \"$R/usr\" && mount -o remount,bind,ro \"$R/usr\"",
    `mount --bind ${sq(join(INST, "usr/local"))} "$R/usr/local" && mount -o remount,bind,ro "$R/usr/local"`,
    "mkdir \"$R/etc\" && cp -a /etc/. \"$R/etc/\"",
    `printf '127.0.0.1 localhost ${["corral-gateway", "corral-scheduler", "corral-registry", "corral-registry-headless"].join(" ")}\\n' > "$R/etc/hosts"`,
    `echo 'corral:x:${uid}:${gid}::/var/lib/corral:/usr/sbin/nologin' >> "$R/etc/passwd"`,
    "mkdir \"$R/dev\" && mount --rbind /dev \"$R/dev\"",
    "mkdir \"$R/proc\" && mount -t proc proc \"$R/proc\"",
    // The image's own directories (Dockerfile: install -d).
    `mkdir -p "$R/tmp" "$R/run/corral" "$R/var/lib/corral/models" && chown ${uid}:${gid} "$R/run/corral" "$R/var/lib/corral" "$R/var/lib/corral/models"`,
  ];
  const tmpl = Object.fromEntries((w.spec.volumeClaimTemplates ?? []).map((t) => [t.metadata.name, `${t.metadata.name}-${w.metadata.name}-0`]));
  for (const m of c.volumeMounts ?? []) {
    const v = (pod.volumes ?? []).find((x) => x.name === m.name);
    let src = null;
    lines.push(`mkdir -p "$R${m.mountPath}"`);
    if (!v && tmpl[m.name]) src = join(CLAIMS, tmpl[m.name]);
    else if (v.persistentVolumeClaim) src = join(CLAIMS, v.persistentVolumeClaim.claimName);
    else if (v.emptyDir) { lines.push(`mount -t tmpfs -o mode=0777 tmpfs "$R${m.mountPath}"`); continue; }
    else if (v.secret || v.configMap) {
      const o = v.secret ? find("Secret", v.secret.secretName) : find("ConfigMap", v.configMap.name);
      const files = Object.fromEntries(Object.entries(o.data).map(([k, d]) => [k, v.secret ? Buffer.from(d, "base64") : d]));
      src = join(P, `vol-${v.name}`);
      kubeletVolume(src, files, (v.secret ?? v.configMap).defaultMode ?? 0o644, fsGroup);
    } else throw new Error(`volume ${m.name}: not emulated`);
    mkdirSync(src, { recursive: true });
    lines.push(`mount --bind ${sq(src)} "$R${m.mountPath}"`);
    if (m.readOnly || v?.secret || v?.configMap) lines.push(`mount -o remount,bind,ro "$R${m.mountPath}"`);
  }
  lines.push("mount -o remount,ro \"$R\"");
  const envArgs = Object.entries(env).map(([k, v]) => sq(`${k}=${v}`)).join(" ");
  const groups = [gid, fsGroup].filter((g) => g !== undefined).join(",");
  lines.push(`exec chroot "$R" /usr/bin/setpriv --reuid ${uid} --regid ${gid} --groups ${groups} --no-new-privs ` +
    `--inh-caps -all --bounding-set -all /usr/bin/env -i ${envArgs} /bin/sh -c 'cd /var/lib/corral && exec "$@"' sh ${c.command.map(sq).join(" ")}`);
  return lines.join("\n");
}

const pods = {};
function startPod(component, tag, extraEnv = {}) {
  const w = byComponent(component);
  const script = podScript(w, tag, extraEnv);
  const log = join(T, "pods", `${tag}.log`);
  const out = openSync(log, "a");
  const p = spawn("unshare", ["--mount", "--pid", "--fork", "--", "sh", "-c", script], { stdio: ["ignore", out, out] });
  const pod = { w, tag, log, proc: p, exited: null };
  p.on("exit", (code, sig) => { pod.exited = { code, sig }; });
  pods[tag] = pod;
  return pod;
}

// The host PID of the pod's container process (unshare's child).
function podPid(pod) {
  const kids = readFileSync(`/proc/${pod.proc.pid}/task/${pod.proc.pid}/children`, "utf8").trim();
  return Number(kids.split(/\s+/)[0]) || null;
}

// corral-runner processes in the node pod's PID namespace (host PIDs).
function nodeRunners(pod) {
  const ns = (pid) => { try { return readlinkSync(`/proc/${pid}/ns/pid`); } catch { return null; } };
  const want = ns(podPid(pod));
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, "utf8").trim() === "corral-runner" && ns(d) === want) out.push(Number(d));
    } catch { /* gone */ }
  }
  return out.sort();
}

function containerPort(c, port) {
  return typeof port === "number" ? port : c.ports.find((p) => p.name === port).containerPort;
}

async function probe(pod, kind) {
  const c = podSpecOf(pod.w).containers[0];
  const p = c[kind];
  if (p.httpGet) {
    const r = await fetch(`http://127.0.0.1:${containerPort(c, p.httpGet.port)}${p.httpGet.path}`, { signal: AbortSignal.timeout(3000) });
    return r.status >= 200 && r.status < 400;
  }
  if (p.tcpSocket)
    return new Promise((res) => {
      const s = connect(containerPort(c, p.tcpSocket.port), "127.0.0.1");
      s.on("connect", () => { s.destroy(); res(true); });
      s.on("error", () => res(false));
    });
  if (p.exec) {
    const pid = podPid(pod);
    const uid = podSpecOf(pod.w).securityContext.runAsUser;
    const r = spawnSync("nsenter", ["-t", String(pid), "-m", "-p", "-r", "-w", "-S", String(uid), "-G", String(uid), ...p.exec.command],
      { timeout: 10000, env: { PATH: IMAGE_ENV.PATH } });
    return r.status === 0;
  }
  return false;
}

async function ready(pod, ms = 60000) {
  const r = await until(`${pod.tag} ready`, async () => pod.exited === null && probe(pod, "readinessProbe"), ms);
  if (r) ok(`${pod.tag}: readinessProbe passes`);
  else bad(`${pod.tag}: not ready (${pod.exited ? `exited ${JSON.stringify(pod.exited)}` : "probe fails"}); log:\n${readFileSync(pod.log, "utf8").slice(-2000)}`);
  return !!r;
}

async function stopPod(pod) {
  const pid = podPid(pod);
  const grace = podSpecOf(pod.w).terminationGracePeriodSeconds * 1000;
  const t0 = Date.now();
  if (pid) process.kill(pid, "SIGTERM");
  const done = await until(`${pod.tag} exit`, () => pod.exited !== null, grace);
  if (!done) { bad(`${pod.tag}: still running ${grace / 1000} s after SIGTERM`); pod.proc.kill("SIGKILL"); return; }
  const ms = Date.now() - t0;
  if (pod.exited.code === 0) ok(`${pod.tag}: stopped on SIGTERM in ${ms} ms (grace ${grace / 1000} s), status 0`);
  else bad(`${pod.tag}: exit ${JSON.stringify(pod.exited)} on SIGTERM; log:\n${readFileSync(pod.log, "utf8").slice(-1500)}`);
}

const apiKey = Buffer.from(objs.find((o) => o.kind === "Secret" && o.metadata.name.startsWith("corral-api-key-")).data.CORRAL_API_KEY, "base64").toString();
const GW = `http://127.0.0.1:${containerPort(podSpecOf(byComponent("gateway")).containers[0], "http")}`;
const api = (path, body) => fetch(`${GW}${path}`, {
  method: body ? "POST" : "GET", body: body && JSON.stringify(body),
  headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
  signal: AbortSignal.timeout(120000),
});

try {
  const store = join(CLAIMS, "models-corral-registry-0");
  mkdirSync(store, { recursive: true });
  chownSync(store, 11434, 11434);

  const registry = startPod("registry", "registry");
  await ready(registry);
  let scheduler = startPod("scheduler", "scheduler");
  await ready(scheduler);
  const gateway = startPod("gateway", "gateway");
  await ready(gateway);
  const node = startPod("node", "node", { CORRAL_GPU_INVENTORY: "0:Test GPU:24000000000,cpu:16000000000" });
  await ready(node);
  for (const p of [registry, scheduler, gateway, node])
    (await probe(p, "livenessProbe")) ? ok(`${p.tag}: livenessProbe passes`) : bad(`${p.tag}: livenessProbe fails`);

  // The root is read-only and the volumes are not: the pods ran anyway.
  const rw = spawnSync("nsenter", ["-t", String(podPid(node)), "-m", "-p", "-r", "-w", "-S", "11434", "-G", "11434",
    "sh", "-c", "touch /x 2>/dev/null && echo root-writable; touch /var/cache/corral/x && echo cache-writable"],
  { encoding: "utf8", env: { PATH: IMAGE_ENV.PATH } });
  rw.stdout.trim() === "cache-writable" ? ok("node pod: root read-only, its cache volume writable")
    : bad(`node pod: root/volume writability wrong: ${rw.stdout} ${rw.stderr}`);

  const joined = await until("node joined", () => readFileSync(scheduler.log, "utf8").includes(`node '${NODE_NAME}' joined`), 30000);
  joined ? ok(`the node agent joined over CURVE, keys from the Secrets (node name ${NODE_NAME} from spec.nodeName)`)
    : bad(`node did not join; node log:\n${readFileSync(node.log, "utf8").slice(-1500)}`);

  const noKey = await fetch(`${GW}/api/tags`);
  noKey.status === 401 ? ok("the gateway refuses a request without the API key from the Secret") : bad(`no key: ${noKey.status}`);

  // A model, created through the gateway with the corral CLI.
  execFileSync(join(BUILD, "bin/corral-gguf-synth"), ["--out", join(T, "m.gguf"), "--type", "q8_0"], { stdio: "ignore" });
  writeFileSync(join(T, "Modelfile"), "FROM ./m.gguf\nPARAMETER temperature 0\n");
  const cr = spawnSync(join(BUILD, "bin/corral"), ["create", "k8s", "-f", "Modelfile"],
    { cwd: T, encoding: "utf8", env: { ...process.env, CORRAL_HOST: GW.replace("http://", ""), CORRAL_API_KEY: apiKey } });
  cr.status === 0 ? ok("corral create through the gateway") : bad(`create: ${cr.stdout} ${cr.stderr}`);

  const chat = { model: "k8s", messages: [{ role: "user", content: "hi" }], stream: false, options: { num_predict: 4 } };
  const r1 = await (await api("/api/chat", chat)).json();
  r1.done ? ok("chat answered") : bad(`chat: ${JSON.stringify(r1)}`);
  const ps = await (await api("/api/ps")).json();
  const onNode = ps.models?.some((m) => m.name === "k8s:latest" && m.host === NODE_NAME);
  onNode ? ok(`the model runs on the node agent (${NODE_NAME})`) : bad(`ps: ${JSON.stringify(ps)}`);
  const cached = readdirSync(`/proc/${podPid(node)}/root/var/cache/corral/blobs`).filter((f) => /^sha256-[0-9a-f]{64}$/.test(f));
  cached.length && existsSync(join(store, "blobs", cached[0]))
    ? ok("the node fetched the blob into its cache volume") : bad(`node cache: ${cached}`);

  // The scheduler pod dies (SIGKILL, as an OOM kill or a crash): the node
  // agent keeps its runner for CORRAL_NODE_TIMEOUT, the new pod adopts it.
  const before = nodeRunners(node);
  process.kill(podPid(scheduler), "SIGKILL");
  await until("scheduler gone", () => scheduler.exited !== null, 10000);
  scheduler = startPod("scheduler", "scheduler2");
  await ready(scheduler);
  const adopted = await until("adopted", async () => {
    const p = await (await api("/api/ps")).json();
    return p.models?.some((m) => m.name === "k8s:latest" && m.host === NODE_NAME);
  }, 30000);
  adopted ? ok("after the scheduler pod was killed and replaced, ps lists the node's runner again") : bad("runner not adopted");
  const r2 = await (await api("/api/chat", chat)).json();
  const loads2 = (readFileSync(scheduler.log, "utf8").match(/ loading k8s/g) ?? []).length;
  r2.done && loads2 === 0 && r2.load_duration < 1e9 && before.length && nodeRunners(node).join() === before.join()
    ? ok(`chat served by the adopted runner, the same process (load_duration ${r2.load_duration} ns, no load)`)
    : bad(`after the kill: ${JSON.stringify(r2)}, loads ${loads2}, runners ${before} -> ${nodeRunners(node)}`);

  // A graceful replacement (SIGTERM: a rollout, a drain, a failed liveness
  // probe) stops the runners, as `systemctl stop` does on a host; the next
  // request loads the model again.
  await stopPod(scheduler);
  const gone = await until("runners stopped", () => nodeRunners(node).length === 0, 30000);
  gone ? ok("a scheduler stopped by SIGTERM stops the node's runners") : bad(`runners left: ${nodeRunners(node)}`);
  scheduler = startPod("scheduler", "scheduler3");
  await ready(scheduler);
  const r3 = await (await api("/api/chat", chat)).json();
  const loads3 = (readFileSync(scheduler.log, "utf8").match(/ loading k8s/g) ?? []).length;
  r3.done && loads3 === 1 ? ok("after a graceful replacement the next request loads the model again")
    : bad(`after the graceful replacement: ${JSON.stringify(r3)}, loads ${loads3}`);

  for (const p of [gateway, node, scheduler, registry]) await stopPod(p);
} catch (e) {
  bad(`${e.stack}`);
} finally {
  for (const p of Object.values(pods)) if (p.exited === null) p.proc.kill("SIGKILL");
  if (!process.env.CORRAL_K8S_KEEP) fx.cleanup();
  else console.log(`kept ${T}`);
}
console.log(`pods: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
