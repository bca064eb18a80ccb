// Every kustomization of deploy/k8s, rendered, is valid against the
// Kubernetes API schemas (with unknown fields refused, as the API server
// does) and keeps every rule of lib/rules.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { render } from "../lib/kustomize.mjs";
import { schemaErrors } from "../lib/schema.mjs";
import { check, workloads } from "../lib/rules.mjs";
import { readDefaults } from "../lib/defaults.mjs";
import { SOURCE_DIR, TARGETS, preparedCopy } from "../lib/fixture.mjs";

const defaults = readDefaults(SOURCE_DIR);
const fx = preparedCopy();
test.after(() => fx.cleanup());

for (const target of TARGETS) {
  test(`${target}: every object is valid against the Kubernetes API schemas`, async () => {
    const objs = render(join(fx.dir, target));
    assert.ok(objs.length > 10, `only ${objs.length} objects`);
    for (const o of objs) assert.deepEqual(await schemaErrors(o), [], `${o.kind}/${o.metadata.name}`);
  });

  test(`${target}: keeps the rules of docs/deploy.md`, () => {
    assert.deepEqual(check(render(join(fx.dir, target)), defaults), []);
  });
}

test("base: the objects docs/deploy.md describes are all there", () => {
  const objs = render(join(fx.dir, "base"));
  const have = new Set(objs.map((o) => `${o.kind}/${o.metadata.name}`));
  for (const want of ["Namespace/corral", "Deployment/corral-gateway", "Service/corral-gateway",
    "PodDisruptionBudget/corral-gateway", "Deployment/corral-scheduler", "Service/corral-scheduler",
    "StatefulSet/corral-registry", "Service/corral-registry", "DaemonSet/corral-node",
    "NetworkPolicy/corral-default-deny", "ConfigMap/corral-node-keys", "ServiceAccount/corral"])
    assert.ok(have.has(want), `${want} is missing`);
  for (const kind of ["Secret", "ConfigMap"])
    for (const prefix of kind === "Secret" ? ["corral-api-key-", "corral-scheduler-curve-", "corral-node-curve-"] : ["corral-config-"])
      assert.ok(objs.some((o) => o.kind === kind && o.metadata.name.startsWith(prefix)), `${kind} ${prefix}<hash>`);
  assert.equal(workloads(objs).length, 4);
  assert.ok(objs.every((o) => o.kind === "Namespace" || o.metadata.namespace === "corral"));
});

test("the overlays change only what they say", () => {
  const base = render(join(fx.dir, "base"));
  const nv = render(join(fx.dir, "overlays/nvidia-runtime"));
  const ds = nv.find((o) => o.kind === "DaemonSet");
  assert.equal(ds.spec.template.spec.runtimeClassName, "nvidia");
  delete ds.spec.template.spec.runtimeClassName;
  assert.deepEqual(nv, base);
  const ing = render(join(fx.dir, "overlays/ingress"));
  assert.deepEqual(ing.filter((o) => o.kind !== "Ingress"), base);
  const i = ing.find((o) => o.kind === "Ingress");
  assert.ok(i.spec.tls?.[0]?.secretName, "the Ingress serves TLS");
});

test("corral keygen writes the key files the kustomization names", (t) => {
  if (!fx.keygen) return t.skip("no corral-node in CORRAL_BUILD_DIR");
  for (const f of ["scheduler", "scheduler_secret", "node", "node_secret"])
    assert.ok(existsSync(join(fx.dir, "base/keys", f)), f);
  const objs = render(join(fx.dir, "base"));
  const nodeKeys = objs.find((o) => o.metadata.name === "corral-node-keys");
  assert.match(nodeKeys.data.node, /public-key = "/);
  assert.doesNotMatch(nodeKeys.data.node, /secret-key/, "only the public certificate goes to the scheduler");
});
