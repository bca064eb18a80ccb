// schema.mjs: checks an object against the Kubernetes API schemas that
// the kubernetes-models package compiles from the API's OpenAPI document.
//
// Those validators check types, formats, enums and required fields, but
// like the OpenAPI schemas they let unknown fields through, where the API
// server (kubectl's default --validate=strict) refuses them. So the object
// is validated a second time through a Proxy that records every field the
// validator reads: a compiled validator reads each field its schema
// declares, and enumerates the keys of a map (labels, data), so a field
// that was never read is one the schema does not have.
const cache = new Map();

async function modelFor(apiVersion, kind) {
  if (!/^[a-z0-9.]+(\/v[0-9a-z]+)?$/.test(apiVersion ?? "")) return null;
  const spec = `kubernetes-models/${apiVersion}`;
  if (!cache.has(spec)) {
    try {
      cache.set(spec, await import(spec));
    } catch {
      cache.set(spec, null);
    }
  }
  const mod = cache.get(spec);
  return mod?.[kind] ?? null;
}

function tracked(root) {
  const read = new WeakMap();
  const maps = new WeakSet();
  const note = (t, k) => {
    if (typeof k !== "string") return;
    if (!read.has(t)) read.set(t, new Set());
    read.get(t).add(k);
  };
  const wrap = (o) => {
    if (o === null || typeof o !== "object") return o;
    return new Proxy(o, {
      get(t, k, r) { note(t, k); return wrap(Reflect.get(t, k, r)); },
      has(t, k) { note(t, k); return Reflect.has(t, k); },
      ownKeys(t) { maps.add(t); return Reflect.ownKeys(t); },
    });
  };
  const unknown = () => {
    const out = [];
    const walk = (o, path) => {
      if (o === null || typeof o !== "object") return;
      if (Array.isArray(o)) return o.forEach((v, i) => walk(v, `${path}/${i}`));
      for (const k of Object.keys(o)) {
        if (!maps.has(o) && !read.get(o)?.has(k)) out.push(`${path}/${k}`);
        walk(o[k], `${path}/${k}`);
      }
    };
    walk(root, "");
    return out;
  };
  return { proxy: wrap(root), unknown };
}

// A Secret's data as the API server reads it: kustomize breaks long base64
// into lines, and Go's base64 decoder skips the newlines, where the
// schema's "byte" format does not.
function asServerReads(obj) {
  const o = structuredClone(obj);
  if (o.kind === "Secret" && o.data)
    for (const k of Object.keys(o.data))
      if (typeof o.data[k] === "string") o.data[k] = o.data[k].replace(/[\r\n]/g, "");
  return o;
}

// Returns a list of problems (empty when the object is valid).
export async function schemaErrors(obj) {
  const Model = await modelFor(obj.apiVersion, obj.kind);
  if (!Model) return [`no API schema for ${obj.apiVersion} ${obj.kind}`];
  const errs = [];
  try {
    new Model(asServerReads(obj)).validate();
  } catch (e) {
    errs.push(e.message);
  }
  const t = tracked(asServerReads(obj));
  try {
    Model.prototype.validate.call(t.proxy);
  } catch {
    /* reported above */
  }
  for (const p of t.unknown()) errs.push(`unknown field ${p}`);
  return errs;
}
