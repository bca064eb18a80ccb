// lib/kustomize.mjs renders as kustomize does, and refuses what it does
// not implement rather than rendering it wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { loadYamlDocs, nameHash, parseEnvFile, render } from "../lib/kustomize.mjs";
import { TARGETS, preparedCopy } from "../lib/fixture.mjs";

const fx = preparedCopy();
const scratch = mkdtempSync(join(tmpdir(), "corral-kust-"));
test.after(() => { fx.cleanup(); rmSync(scratch, { recursive: true, force: true }); });

function kustomization(name, text, files = {}) {
  const dir = join(scratch, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "kustomization.yaml"), text);
  for (const [f, body] of Object.entries(files)) writeFileSync(join(dir, f), body);
  return dir;
}

const CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n";

test("generated names carry kustomize's hash (values printed by kustomize v5.5.0)", () => {
  // configMapGenerator literals A=b; secretGenerator of a file of 100 'a'.
  assert.equal(nameHash({ kind: "ConfigMap", metadata: { name: "xx" }, data: { A: "b" } }), "b9t2424hkf");
  const dir = kustomization("secret", "secretGenerator:\n- name: ss\n  files: [f]\n", { f: "a".repeat(100) });
  const [s] = render(dir);
  assert.equal(s.metadata.name, "ss-fgd55h4b6c");
  assert.match(s.data.f, /^[A-Za-z0-9+/]{70}\n[A-Za-z0-9+/=]+\n$/, "base64 in lines of 70");
});

test("a generated name is followed by every reference to it", () => {
  const dir = kustomization("refs", [
    "resources: [d.yaml]", "configMapGenerator:", "- name: conf", "  envs: [e.env]",
  ].join("\n"), {
    "e.env": "K=v\n",
    "d.yaml": [
      "apiVersion: apps/v1", "kind: Deployment", "metadata: {name: d}", "spec:",
      "  selector: {matchLabels: {a: b}}", "  template:", "    metadata: {labels: {a: b}}", "    spec:",
      "      containers:", "      - name: c", "        image: i",
      "        envFrom: [{configMapRef: {name: conf}}]",
      "        env: [{name: X, valueFrom: {configMapKeyRef: {name: conf, key: K}}}]",
      "      volumes: [{name: v, configMap: {name: conf}}]",
    ].join("\n"),
  });
  const objs = render(dir);
  const cm = objs.find((o) => o.kind === "ConfigMap");
  assert.match(cm.metadata.name, /^conf-[a-z0-9]{10}$/);
  const c = objs[0].spec.template.spec;
  assert.equal(c.containers[0].envFrom[0].configMapRef.name, cm.metadata.name);
  assert.equal(c.containers[0].env[0].valueFrom.configMapKeyRef.name, cm.metadata.name);
  assert.equal(c.volumes[0].configMap.name, cm.metadata.name);
});

test("namespace, labels and images are applied; YAML is read as 1.1 (0440 is octal)", () => {
  const dir = kustomization("transform", [
    "namespace: ns", "labels:", "- pairs: {p: q}", "images:", "- {name: img, newName: reg/img, newTag: v1}",
    "resources: [r.yaml]",
  ].join("\n"), {
    "r.yaml": [
      "apiVersion: v1", "kind: Namespace", "metadata: {name: ns}", "---",
      "apiVersion: v1", "kind: Pod", "metadata: {name: p}", "spec:",
      "  containers: [{name: c, image: 'img:old'}]", "  volumes: [{name: s, secret: {secretName: x, defaultMode: 0440}}]",
    ].join("\n"),
  });
  const [ns, p] = render(dir);
  assert.equal(ns.metadata.namespace, undefined, "a Namespace is cluster-scoped");
  assert.equal(p.metadata.namespace, "ns");
  assert.deepEqual(p.metadata.labels, { p: "q" });
  assert.equal(p.spec.containers[0].image, "reg/img:v1");
  assert.equal(p.spec.volumes[0].secret.defaultMode, 0o440);
});

test("what it does not implement is refused, naming it", () => {
  const cases = [
    ["commonLabels: {a: b}\nresources: [c.yaml]", /commonLabels.*not supported/],
    ["resources: [https://example.com/x.yaml]", /remote resources/],
    ["resources: [../outside.yaml]", /does not exist|outside the root/],
    ["labels:\n- pairs: {a: b}\n  includeSelectors: true\nresources: [c.yaml]", /includeSelectors.*not supported/],
    ["configMapGenerator:\n- name: x\n  literals: [a=b]", /literals.*not supported/],
    ["secretGenerator:\n- name: x\n  files: [missing]", /missing: no such file/],
    ["resources: [c.yaml]\npatches:\n- path: p.yaml", /list patches are not supported/],
    ["resources: [c.yaml]\npatches:\n- path: c.yaml\n  target: {kind: ConfigMap}", /target.*not supported/],
    ["apiVersion: v1\nkind: ConfigMap", /not a kustomize.config.k8s.io\/v1beta1 Kustomization/],
  ];
  cases.forEach(([text, re], i) => {
    const dir = kustomization(`bad${i}`, text, {
      "c.yaml": CM,
      "p.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\nimmutable: true\nlist: [1]\n",
    });
    assert.throws(() => render(dir), re, text);
  });
  assert.throws(() => parseEnvFile('A="b"\n', "x.env"), /quoted/);
  assert.throws(() => parseEnvFile("A\n", "x.env"), /not KEY=value/);
  assert.throws(() => loadYamlDocs("a: [\n", "x.yaml"));
});

test("same output as kubectl kustomize, object for object", (t) => {
  let kubectl = true;
  try {
    execFileSync("kubectl", ["kustomize", "--help"], { stdio: "ignore" });
  } catch {
    kubectl = false;
  }
  if (!kubectl) return t.skip("kubectl is not installed (CI has none): compared where it is");
  for (const target of TARGETS) {
    const out = execFileSync("kubectl", ["kustomize", join(fx.dir, target)], { encoding: "utf8" });
    const theirs = loadYamlDocs(out, "kubectl kustomize");
    const mine = render(join(fx.dir, target));
    const key = (o) => `${o.kind}/${o.metadata.name}`;
    assert.deepEqual(mine.map(key).sort(), theirs.map(key).sort(), target);
    for (const o of mine) {
      const other = theirs.find((x) => key(x) === key(o));
      assert.ok(isDeepStrictEqual(o, other), `${target}: ${key(o)} differs`);
    }
  }
});
