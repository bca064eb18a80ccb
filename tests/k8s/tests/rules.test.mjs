// Each rule of lib/rules.mjs fires when the rendered base is broken the
// way it guards against, and only then: a rule that cannot fail checks
// nothing. Each case mutates a fresh rendering, expects the named rule to
// report, and the unbroken rendering keeps every rule.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { render } from "../lib/kustomize.mjs";
import { RULES, check } from "../lib/rules.mjs";
import { schemaErrors } from "../lib/schema.mjs";
import { readDefaults } from "../lib/defaults.mjs";
import { SOURCE_DIR, preparedCopy } from "../lib/fixture.mjs";

const defaults = readDefaults(SOURCE_DIR);
const fx = preparedCopy();
test.after(() => fx.cleanup());
const fresh = () => render(join(fx.dir, "base"));

const obj = (objs, kind, name) => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name.startsWith(name));
  assert.ok(o, `${kind}/${name}`);
  return o;
};
const pod = (objs, kind, name) => obj(objs, kind, name).spec.template.spec;
const ctr = (objs, kind, name) => pod(objs, kind, name).containers[0];
const envSet = (c, name, value) => {
  const e = c.env.find((x) => x.name === name);
  if (e) e.value = value;
  else c.env.push({ name, value });
};

// [rule, what is broken, mutation]
const CASES = [
  ["non-root", "runAsNonRoot off", (o) => {
    pod(o, "Deployment", "corral-gateway").securityContext.runAsNonRoot = false;
    delete ctr(o, "Deployment", "corral-gateway").securityContext.runAsNonRoot;
  }],
  ["non-root", "uid 0", (o) => { pod(o, "DaemonSet", "corral-node").securityContext.runAsUser = 0; }],
  ["non-root", "no numeric uid (the image's USER is a name)", (o) => {
    delete pod(o, "StatefulSet", "corral-registry").securityContext.runAsUser;
  }],
  ["read-only-root", "a writable root", (o) => {
    ctr(o, "Deployment", "corral-scheduler").securityContext.readOnlyRootFilesystem = false;
  }],
  ["drop-all", "capabilities kept", (o) => {
    ctr(o, "DaemonSet", "corral-node").securityContext.capabilities.drop = ["NET_RAW"];
  }],
  ["drop-all", "a capability added", (o) => {
    ctr(o, "Deployment", "corral-gateway").securityContext.capabilities.add = ["NET_BIND_SERVICE"];
  }],
  ["no-escalation", "escalation allowed", (o) => {
    delete ctr(o, "StatefulSet", "corral-registry").securityContext.allowPrivilegeEscalation;
  }],
  ["no-escalation", "privileged", (o) => { ctr(o, "DaemonSet", "corral-node").securityContext.privileged = true; }],
  ["seccomp", "Unconfined", (o) => {
    pod(o, "Deployment", "corral-gateway").securityContext.seccompProfile.type = "Unconfined";
    ctr(o, "Deployment", "corral-gateway").securityContext.seccompProfile.type = "Unconfined";
  }],
  ["host", "hostNetwork", (o) => { pod(o, "DaemonSet", "corral-node").hostNetwork = true; }],
  ["host", "a hostPath cache", (o) => {
    const v = pod(o, "DaemonSet", "corral-node").volumes.find((x) => x.name === "cache");
    delete v.emptyDir;
    v.hostPath = { path: "/var/cache/corral", type: "DirectoryOrCreate" };
  }],
  ["resources", "no memory limit", (o) => { delete ctr(o, "Deployment", "corral-gateway").resources.limits.memory; }],
  ["resources", "a request above its limit", (o) => { ctr(o, "Deployment", "corral-scheduler").resources.requests.cpu = "8"; }],
  ["resources", "GPU request != limit", (o) => { ctr(o, "DaemonSet", "corral-node").resources.requests["nvidia.com/gpu"] = 0; }],
  ["grace", "grace shorter than the drain", (o) => { pod(o, "Deployment", "corral-gateway").terminationGracePeriodSeconds = 20; }],
  ["grace", "a drain timeout raised past the grace", (o) => { obj(o, "ConfigMap", "corral-config-").data.CORRAL_DRAIN_TIMEOUT = "2m"; }],
  ["grace", "the default grace (30 s) below a 45 s drain", (o) => {
    delete pod(o, "StatefulSet", "corral-registry").terminationGracePeriodSeconds;
    envSet(ctr(o, "StatefulSet", "corral-registry"), "CORRAL_DRAIN_TIMEOUT", "45s");
  }],
  ["probes", "gateway readiness on /", (o) => { ctr(o, "Deployment", "corral-gateway").readinessProbe.httpGet.path = "/"; }],
  ["probes", "gateway liveness on /api/health", (o) => { ctr(o, "Deployment", "corral-gateway").livenessProbe.httpGet.path = "/api/health"; }],
  ["probes", "no liveness probe", (o) => { delete ctr(o, "DaemonSet", "corral-node").livenessProbe; }],
  ["probes", "a probe on a port the container lacks", (o) => { ctr(o, "StatefulSet", "corral-registry").readinessProbe.tcpSocket.port = "http"; }],
  ["selectors", "a selector its template does not match", (o) => {
    obj(o, "Deployment", "corral-gateway").spec.template.metadata.labels["app.kubernetes.io/component"] = "gw";
  }],
  ["selectors", "a Service selecting no pod", (o) => { obj(o, "Service", "corral-registry").spec.selector["app.kubernetes.io/component"] = "store"; }],
  ["selectors", "a selector that also takes another workload's pods", (o) => {
    delete obj(o, "DaemonSet", "corral-node").spec.selector.matchLabels["app.kubernetes.io/component"];
  }],
  ["selectors", "a StatefulSet whose serviceName is no Service", (o) => { obj(o, "StatefulSet", "corral-registry").spec.serviceName = "nope"; }],
  ["selectors", "a NetworkPolicy source selecting no pod", (o) => {
    obj(o, "NetworkPolicy", "corral-scheduler").spec.ingress[0].from[0].podSelector.matchLabels["app.kubernetes.io/component"] = "gw";
  }],
  ["references", "a missing Secret", (o) => { pod(o, "DaemonSet", "corral-node").volumes.find((v) => v.secret).secret.secretName = "corral-node-keyz"; }],
  ["references", "a missing ConfigMap", (o) => { ctr(o, "Deployment", "corral-gateway").envFrom[0].configMapRef.name = "corral-settings"; }],
  ["references", "a missing claim", (o) => {
    pod(o, "Deployment", "corral-scheduler").volumes.find((v) => v.persistentVolumeClaim).persistentVolumeClaim.claimName = "models-corral-registry-1";
  }],
  ["references", "a mount of no volume", (o) => { ctr(o, "Deployment", "corral-gateway").volumeMounts.push({ name: "cache", mountPath: "/c" }); }],
  ["references", "a missing ServiceAccount", (o) => { pod(o, "StatefulSet", "corral-registry").serviceAccountName = "registry"; }],
  ["references", "a key the Secret lacks", (o) => {
    const s = obj(o, "Secret", "corral-api-key-");
    ctr(o, "Deployment", "corral-gateway").env.push({ name: "K", valueFrom: { secretKeyRef: { name: s.metadata.name, key: "api-key" } } });
  }],
  ["ports", "a Service port leading nowhere", (o) => { obj(o, "Service", "corral-scheduler").spec.ports[1].targetPort = "node"; }],
  ["ports", "a Service port that is not its container port", (o) => {
    const sp = obj(o, "Service", "corral-gateway").spec.ports[0];
    sp.port = 80;
  }],
  ["ports", "a bind endpoint on no container port", (o) => { envSet(ctr(o, "Deployment", "corral-scheduler"), "CORRAL_SCHEDULER_ENDPOINT", "tcp://0.0.0.0:5555"); }],
  ["ports", "an endpoint naming a port its Service lacks", (o) => { envSet(ctr(o, "DaemonSet", "corral-node"), "CORRAL_NODE_SCHEDULER", "tcp://corral-scheduler:11436"); }],
  ["ports", "the gateways sent to the nodes' CURVE port", (o) => { envSet(ctr(o, "Deployment", "corral-gateway"), "CORRAL_SCHEDULER_ENDPOINT", "tcp://corral-scheduler:11435"); }],
  ["ports", "an endpoint naming no Service", (o) => { envSet(ctr(o, "Deployment", "corral-gateway"), "CORRAL_REGISTRY_ENDPOINT", "tcp://registry:11437"); }],
  ["ports", "the gateway listening where its container port is not", (o) => { envSet(ctr(o, "Deployment", "corral-gateway"), "CORRAL_HOST", "0.0.0.0:8080"); }],
  ["ports", "all ports moved together, away from corral's defaults", (o) => {
    const g = ctr(o, "Deployment", "corral-gateway");
    envSet(g, "CORRAL_HOST", "0.0.0.0:8080");
    g.ports[0].containerPort = 8080;
    obj(o, "Service", "corral-gateway").spec.ports[0].port = 8080;
  }],
  ["network", "no default deny", (o) => { o.splice(o.indexOf(obj(o, "NetworkPolicy", "corral-default-deny")), 1); }],
  ["network", "the registry open to all", (o) => { delete obj(o, "NetworkPolicy", "corral-registry").spec.ingress[0].from; }],
  ["network", "the scheduler open to another namespace", (o) => {
    obj(o, "NetworkPolicy", "corral-scheduler").spec.ingress[1].from.push({ namespaceSelector: {} });
  }],
  ["network", "the scheduler's Service a LoadBalancer", (o) => { obj(o, "Service", "corral-scheduler").spec.type = "LoadBalancer"; }],
  ["mounts", "an emptyDir without a size limit", (o) => { delete pod(o, "Deployment", "corral-gateway").volumes[0].emptyDir.sizeLimit; }],
  ["mounts", "a Secret mounted writable", (o) => { ctr(o, "DaemonSet", "corral-node").volumeMounts.find((m) => m.name === "curve").readOnly = false; }],
  ["topology", "two schedulers", (o) => { obj(o, "Deployment", "corral-scheduler").spec.replicas = 2; }],
  ["topology", "a rolling scheduler", (o) => { obj(o, "Deployment", "corral-scheduler").spec.strategy = { type: "RollingUpdate" }; }],
  ["topology", "the store mounted writable in the scheduler", (o) => {
    ctr(o, "Deployment", "corral-scheduler").volumeMounts.find((m) => m.name === "models").readOnly = false;
  }],
  ["topology", "the scheduler free to run away from the registry's volume", (o) => { delete pod(o, "Deployment", "corral-scheduler").affinity; }],
  ["topology", "node agents on every node", (o) => { delete pod(o, "DaemonSet", "corral-node").nodeSelector; }],
  ["topology", "no GPU for the node agent", (o) => {
    const r = ctr(o, "DaemonSet", "corral-node").resources;
    delete r.requests["nvidia.com/gpu"];
    delete r.limits["nvidia.com/gpu"];
  }],
  ["topology", "a cache bound above its volume", (o) => { envSet(ctr(o, "DaemonSet", "corral-node"), "CORRAL_NODE_CACHE_MAX", "250GB"); }],
  ["topology", "an unbounded cache on an emptyDir", (o) => {
    const c = ctr(o, "DaemonSet", "corral-node");
    c.env = c.env.filter((e) => e.name !== "CORRAL_NODE_CACHE_MAX");
  }],
  ["topology", "node keys not from a Secret", (o) => { envSet(ctr(o, "DaemonSet", "corral-node"), "CORRAL_NODE_CERT", "/tmp/node"); }],
];

test("the unbroken base keeps every rule", () => {
  assert.deepEqual(check(fresh(), defaults), []);
});

test("every rule has a case that breaks it", () => {
  const covered = new Set(CASES.map(([r]) => r));
  for (const r of RULES) assert.ok(covered.has(r.name), `no case breaks rule ${r.name}`);
});

for (const [name, what, mutate] of CASES) {
  test(`${name} fires on ${what}`, () => {
    const r = RULES.find((x) => x.name === name);
    assert.ok(r, `no rule ${name}`);
    const objs = fresh();
    assert.deepEqual(r.check(objs, defaults), [], "fires before the mutation");
    mutate(objs);
    const got = r.check(objs, defaults);
    assert.ok(got.length > 0, `rule ${name} did not fire`);
  });
}

test("ports: the table in docs/deploy.md is checked against corral's defaults", () => {
  const objs = fresh();
  const wrong = { ...defaults, gatewayPort: defaults.gatewayPort + 1 };
  assert.ok(RULES.find((r) => r.name === "ports").check(objs, wrong).some((v) => /default/.test(v)));
  const wrongNodes = { ...defaults, nodesPort: 1 };
  assert.ok(RULES.find((r) => r.name === "ports").check(objs, wrongNodes).some((v) => /CORRAL_NODES_ENDPOINT/.test(v)));
  const docs = { ...defaults, servicePorts: [...defaults.servicePorts, { port: 11438, service: "corral-registry", name: "admin" }] };
  assert.ok(RULES.find((r) => r.name === "ports").check(objs, docs).length > 0);
});

test("schema: a wrong type, a missing required field and a misspelt field are refused", async () => {
  const objs = fresh();
  const gw = obj(objs, "Deployment", "corral-gateway");
  assert.deepEqual(await schemaErrors(gw), []);
  const a = structuredClone(gw);
  a.spec.template.spec.terminationGracePeriodSeconds = "60";
  assert.match((await schemaErrors(a)).join(), /terminationGracePeriodSeconds must be integer/);
  const b = structuredClone(gw);
  delete b.spec.selector;
  assert.match((await schemaErrors(b)).join(), /required property 'selector'|required property selector/);
  const c = structuredClone(gw);
  c.spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem = true;
  assert.match((await schemaErrors(c)).join(), /unknown field .*readOnlyRootFilesytem/);
  const d = structuredClone(obj(objs, "NetworkPolicy", "corral-gateway"));
  d.spec.policyTypes = ["Inbound"];
  assert.ok((await schemaErrors(d)).length > 0, "an enum value outside the API's");
  assert.match((await schemaErrors({ apiVersion: "apps/v9", kind: "Deployment", metadata: { name: "x" } })).join(), /no API schema/);
});
