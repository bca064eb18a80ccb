// kustomize.mjs: renders a kustomization the way `kubectl kustomize` does,
// for the fields deploy/k8s uses and no others: resources (files and
// directories), namespace, labels (pairs only), images, configMapGenerator
// and secretGenerator (files, envs, options.disableNameSuffixHash),
// generator name hashes and the references to them, and patches (a
// strategic-merge patch file made only of maps). Any other field, or an
// unsupported form of one of these, throws: the test must never pass on a
// manifest it did not render as kustomize would.
//
// Neither kubectl nor kustomize is on CI's machines; where kubectl is
// installed, tests/k8s compares this output with `kubectl kustomize`.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { parseAllDocuments } from "yaml";

const KUSTOMIZATION_FIELDS = new Set([
  "apiVersion", "kind", "namespace", "labels", "resources", "images",
  "configMapGenerator", "secretGenerator", "patches",
]);
const GENERATOR_FIELDS = new Set(["name", "files", "envs", "options", "type"]);
const LABEL_FIELDS = new Set(["pairs"]);
const IMAGE_FIELDS = new Set(["name", "newName", "newTag", "digest"]);
const PATCH_FIELDS = new Set(["path"]);
const CLUSTER_SCOPED = new Set([
  "Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding",
  "PersistentVolume", "StorageClass", "PriorityClass", "IngressClass",
  "CustomResourceDefinition",
]);

class KustomizeError extends Error {}

function fail(where, msg) {
  throw new KustomizeError(`${where}: ${msg}`);
}

function only(obj, allowed, where) {
  for (const k of Object.keys(obj ?? {}))
    if (!allowed.has(k)) fail(where, `field '${k}' is not supported by tests/k8s/lib/kustomize.mjs`);
}

export function loadYamlDocs(text, where) {
  const docs = [];
  // YAML 1.1, as kubectl reads it: 0440 is octal, `yes` a boolean.
  for (const d of parseAllDocuments(text, { version: "1.1" })) {
    if (d.errors.length) fail(where, d.errors.map((e) => e.message).join("; "));
    const v = d.toJS();
    if (v === null || v === undefined) continue;
    if (typeof v !== "object" || Array.isArray(v)) fail(where, "a document is not a mapping");
    docs.push(v);
  }
  return docs;
}

// Files a kustomization names must stay inside its root (kustomize's
// default load restriction).
function inside(root, rel, where) {
  if (/^[a-z]+:\/\//i.test(rel)) fail(where, `'${rel}': remote resources are not supported`);
  const p = resolve(root, rel);
  return p;
}

function insideRoot(root, rel, where) {
  const p = inside(root, rel, where);
  if (p !== root && !p.startsWith(root + "/")) fail(where, `'${rel}' is outside the kustomization root`);
  return p;
}

// KEY=value lines, '#' comments and blank lines skipped (kustomize's env
// file). A line without '=' would take the value from kustomize's own
// environment: refused, as is a quoted value (kustomize keeps the quotes).
export function parseEnvFile(text, where) {
  const out = {};
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/^\s+/, "").replace(/\r$/, "");
    if (!line || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) fail(`${where}:${i + 1}`, "not KEY=value");
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    if (!/^[A-Za-z_][A-Za-z0-9_.-]*$/.test(key)) fail(`${where}:${i + 1}`, `bad key '${key}'`);
    if (/^["']/.test(value)) fail(`${where}:${i + 1}`, "quoted values are not supported");
    if (key in out) fail(`${where}:${i + 1}`, `'${key}' appears twice`);
    out[key] = value;
  });
  return out;
}

// Go's encoding/json: map keys sorted, and <, >, & and U+2028/9 escaped.
function goJson(v) {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${goJson(k)}:${goJson(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v)
    .replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}

// kustomize's name suffix: the first 10 hex digits of a SHA-256 of the
// object's kind, type and data, with 0 1 3 a e mapped to g h k m t. The
// name it hashes is empty (kustomize hashes before it names the object:
// two generators with the same data get the same suffix).
export function nameHash(obj) {
  const m = { kind: obj.kind, name: "", data: obj.data ?? {} };
  if (obj.kind === "Secret") m.type = obj.type;
  if (obj.binaryData && Object.keys(obj.binaryData).length) m.binaryData = obj.binaryData;
  const hex = createHash("sha256").update(goJson(m)).digest("hex");
  const map = { 0: "g", 1: "h", 3: "k", a: "m", e: "t" };
  return [...hex.slice(0, 10)].map((c) => map[c] ?? c).join("");
}

// kustomize writes a secret's base64 longer than 70 characters as lines
// of 70, each ending in a newline (the API server skips them).
function base64Lines(bytes) {
  const b = bytes.toString("base64");
  if (b.length <= 70) return b;
  return b.match(/.{1,70}/g).map((l) => `${l}\n`).join("");
}

function generate(root, gen, kind, where) {
  only(gen, GENERATOR_FIELDS, where);
  only(gen.options, new Set(["disableNameSuffixHash"]), `${where}.options`);
  if (!gen.name) fail(where, "a generator needs a name");
  if (kind === "ConfigMap" && gen.type) fail(where, "type is for secrets");
  const data = {};
  const binaryData = {};
  const put = (key, bytes) => {
    if (key in data || key in binaryData) fail(where, `key '${key}' appears twice`);
    if (kind === "Secret") data[key] = base64Lines(bytes);
    else {
      const text = bytes.toString("utf8");
      if (Buffer.from(text, "utf8").equals(bytes)) data[key] = text;
      else binaryData[key] = bytes.toString("base64");
    }
  };
  for (const f of gen.files ?? []) {
    const eq = f.indexOf("=");
    const key = eq > 0 ? f.slice(0, eq) : basename(f);
    const p = insideRoot(root, eq > 0 ? f.slice(eq + 1) : f, where);
    if (!existsSync(p)) fail(where, `${f}: no such file (see the comment at the top of the kustomization)`);
    put(key, readFileSync(p));
  }
  for (const e of gen.envs ?? []) {
    const p = insideRoot(root, e, where);
    if (!existsSync(p)) fail(where, `${e}: no such file`);
    for (const [k, v] of Object.entries(parseEnvFile(readFileSync(p, "utf8"), e)))
      put(k, Buffer.from(v, "utf8"));
  }
  const obj = { apiVersion: "v1", kind, metadata: { name: gen.name } };
  if (kind === "Secret") obj.type = gen.type ?? "Opaque";
  if (Object.keys(data).length) obj.data = data;
  if (Object.keys(binaryData).length) obj.binaryData = binaryData;
  const hashed = !gen.options?.disableNameSuffixHash;
  return { obj, hashed };
}

// Every place a pod template or an Ingress names a ConfigMap or Secret:
// calls fn(kind, holder, field) so a caller can read or rename it.
export function forEachNameRef(obj, fn) {
  const pod = podSpecOf(obj);
  if (pod) {
    for (const v of pod.volumes ?? []) {
      if (v.secret) fn("Secret", v.secret, "secretName");
      if (v.configMap) fn("ConfigMap", v.configMap, "name");
      for (const s of v.projected?.sources ?? []) {
        if (s.secret) fn("Secret", s.secret, "name");
        if (s.configMap) fn("ConfigMap", s.configMap, "name");
      }
    }
    for (const ps of pod.imagePullSecrets ?? []) fn("Secret", ps, "name");
    for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
      for (const ef of c.envFrom ?? []) {
        if (ef.configMapRef) fn("ConfigMap", ef.configMapRef, "name");
        if (ef.secretRef) fn("Secret", ef.secretRef, "name");
      }
      for (const e of c.env ?? []) {
        if (e.valueFrom?.configMapKeyRef) fn("ConfigMap", e.valueFrom.configMapKeyRef, "name");
        if (e.valueFrom?.secretKeyRef) fn("Secret", e.valueFrom.secretKeyRef, "name");
      }
    }
  }
  if (obj.kind === "Ingress")
    for (const t of obj.spec?.tls ?? []) if (t.secretName) fn("Secret", t, "secretName");
}

// The pod spec of a workload (Deployment, StatefulSet, DaemonSet, Job,
// Pod), else null.
export function podSpecOf(obj) {
  if (obj.kind === "Pod") return obj.spec ?? null;
  if (obj.kind === "CronJob") return obj.spec?.jobTemplate?.spec?.template?.spec ?? null;
  return obj.spec?.template?.spec ?? null;
}

function setImages(obj, images) {
  const pod = podSpecOf(obj);
  if (!pod) return;
  for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
    const m = /^([^:@]+(?::\d+\/[^:@]+)?)(?::([^@]+))?(?:@(.+))?$/.exec(c.image ?? "");
    if (!m) continue;
    const img = images.find((i) => i.name === m[1]);
    if (!img) continue;
    let name = img.newName ?? m[1];
    if (img.digest) name += `@${img.digest}`;
    else if (img.newTag) name += `:${img.newTag}`;
    else if (m[2]) name += `:${m[2]}`;
    c.image = name;
  }
}

// A strategic-merge patch of maps only: lists in a patch would need the
// API's merge keys, which this renderer does not know.
function mergeMaps(dst, patch, where) {
  for (const [k, v] of Object.entries(patch)) {
    if (Array.isArray(v)) fail(where, `'${k}' is a list: list patches are not supported`);
    if (v === null) delete dst[k];
    else if (typeof v === "object") {
      if (dst[k] === undefined) dst[k] = {};
      if (typeof dst[k] !== "object" || Array.isArray(dst[k])) fail(where, `'${k}' is not a map in the target`);
      mergeMaps(dst[k], v, `${where}.${k}`);
    } else dst[k] = v;
  }
}

// Renders the kustomization in dir. Returns the objects, in kustomize's
// order of loading (resources, then generators).
export function render(dir) {
  const root = resolve(dir);
  const file = ["kustomization.yaml", "kustomization.yml", "Kustomization"]
    .map((f) => join(root, f)).find(existsSync);
  if (!file) fail(root, "no kustomization.yaml");
  const docs = loadYamlDocs(readFileSync(file, "utf8"), file);
  if (docs.length !== 1) fail(file, "expected one document");
  const k = docs[0];
  only(k, KUSTOMIZATION_FIELDS, file);
  // Both may be left out, as kustomize allows; if present, they must be these.
  if ((k.apiVersion ?? "kustomize.config.k8s.io/v1beta1") !== "kustomize.config.k8s.io/v1beta1" ||
      (k.kind ?? "Kustomization") !== "Kustomization")
    fail(file, "not a kustomize.config.k8s.io/v1beta1 Kustomization");

  const objs = [];
  for (const r of k.resources ?? []) {
    const p = inside(root, r, file);
    if (!existsSync(p)) fail(file, `resource '${r}' does not exist`);
    if (statSync(p).isDirectory()) {
      if (root.startsWith(p + "/")) fail(file, `resource '${r}' contains this kustomization (a cycle)`);
      objs.push(...render(p));
    } else {
      if (p !== root && !p.startsWith(root + "/")) fail(file, `resource '${r}' is outside the root`);
      for (const d of loadYamlDocs(readFileSync(p, "utf8"), p)) {
        if (!d.apiVersion || !d.kind || !d.metadata?.name) fail(p, "an object without apiVersion, kind or metadata.name");
        objs.push(d);
      }
    }
  }

  const generated = [];
  (k.configMapGenerator ?? []).forEach((g, i) =>
    generated.push(generate(root, g, "ConfigMap", `${file}: configMapGenerator[${i}]`)));
  (k.secretGenerator ?? []).forEach((g, i) =>
    generated.push(generate(root, g, "Secret", `${file}: secretGenerator[${i}]`)));
  for (const { obj } of generated) objs.push(obj);

  (k.patches ?? []).forEach((p, i) => {
    const where = `${file}: patches[${i}]`;
    only(p, PATCH_FIELDS, where);
    const pp = insideRoot(root, p.path, where);
    for (const patch of loadYamlDocs(readFileSync(pp, "utf8"), pp)) {
      const target = objs.find((o) => o.kind === patch.kind && o.metadata.name === patch.metadata?.name &&
        (!patch.apiVersion || o.apiVersion === patch.apiVersion));
      if (!target) fail(where, `no ${patch.kind} '${patch.metadata?.name}' to patch`);
      const { apiVersion, kind, metadata, ...rest } = patch;
      only(metadata, new Set(["name", "namespace"]), `${where}.metadata`);
      mergeMaps(target, rest, pp);
    }
  });

  if (k.namespace !== undefined)
    for (const o of objs) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;

  (k.labels ?? []).forEach((l, i) => {
    only(l, LABEL_FIELDS, `${file}: labels[${i}]`);
    for (const o of objs) o.metadata.labels = { ...(o.metadata.labels ?? {}), ...l.pairs };
  });

  (k.images ?? []).forEach((img, i) => only(img, IMAGE_FIELDS, `${file}: images[${i}]`));
  if (k.images) for (const o of objs) setImages(o, k.images);

  // Hash names last (labels and namespace are not part of the hash), then
  // point every reference at the new names.
  const renamed = new Map();
  for (const { obj, hashed } of generated) {
    if (!hashed) continue;
    const name = `${obj.metadata.name}-${nameHash(obj)}`;
    renamed.set(`${obj.kind}/${obj.metadata.name}`, name);
    obj.metadata.name = name;
  }
  for (const o of objs)
    forEachNameRef(o, (kind, holder, field) => {
      const n = renamed.get(`${kind}/${holder[field]}`);
      if (n) holder[field] = n;
    });
  return objs;
}

export { KustomizeError };
