// rules.mjs: what docs/deploy.md ("Running on Kubernetes") promises of
// every rendered manifest, one rule per concern. Each rule takes all the
// objects of one rendering and the defaults (defaults.mjs) and returns its
// violations as strings naming the object; rules.test.mjs breaks each one
// on purpose and expects it to fire.
import { forEachNameRef, podSpecOf } from "./kustomize.mjs";
import { parseCorralSize, parseDurationMs, parseQuantity } from "./defaults.mjs";

const COMPONENT = "app.kubernetes.io/component";
const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet", "Pod", "Job", "CronJob"]);

export function workloads(objs) {
  return objs.filter((o) => WORKLOAD_KINDS.has(o.kind) && podSpecOf(o));
}

function podLabels(w) {
  return (w.kind === "Pod" ? w.metadata.labels : w.spec.template?.metadata?.labels) ?? {};
}

function component(w) {
  return podLabels(w)[COMPONENT] ?? "";
}

function id(o) {
  return `${o.kind}/${o.metadata.name}`;
}

function containers(w) {
  const p = podSpecOf(w);
  return [...(p.initContainers ?? []), ...(p.containers ?? [])];
}

export function selects(sel, labels) {
  if (!sel) return false;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === "In" && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === "NotIn" && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

function isEmptySelector(sel) {
  return !sel || (!Object.keys(sel.matchLabels ?? {}).length && !(sel.matchExpressions ?? []).length);
}

// A container's environment as the kubelet builds it from envFrom
// ConfigMaps and literal env values (later entries win); Secrets and
// fieldRefs are not known here and are left out.
export function envOf(objs, c) {
  const env = {};
  for (const ef of c.envFrom ?? []) {
    const cm = ef.configMapRef && objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === ef.configMapRef.name);
    if (cm) Object.assign(env, cm.data ?? {});
  }
  for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return env;
}

// The containerPort a probe's or Service's port (a name or a number) means.
function resolvePort(c, port) {
  return (c.ports ?? []).find((p) => (typeof port === "string" ? p.name === port : p.containerPort === port));
}

function rule(name, what, check) {
  return { name, what, check };
}

function perContainer(objs, fn) {
  const out = [];
  for (const w of workloads(objs)) {
    const pod = podSpecOf(w);
    for (const c of containers(w)) fn(w, pod, c, (msg) => out.push(`${id(w)} container ${c.name}: ${msg}`));
  }
  return out;
}

// A connecting endpoint, and the variable the pods it reaches bind with.
const BIND_OF = {
  CORRAL_NODE_SCHEDULER: "CORRAL_NODES_ENDPOINT",
  CORRAL_SCHEDULER_ENDPOINT: "CORRAL_SCHEDULER_ENDPOINT",
  CORRAL_REGISTRY_ENDPOINT: "CORRAL_REGISTRY_ENDPOINT",
};

export const RULES = [
  rule("non-root", "every container runs as a numeric non-root user, and says so (runAsNonRoot)", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      const sc = c.securityContext ?? {};
      const psc = pod.securityContext ?? {};
      if ((sc.runAsNonRoot ?? psc.runAsNonRoot) !== true) bad("runAsNonRoot is not true");
      const uid = sc.runAsUser ?? psc.runAsUser;
      // The image's USER is a name: the kubelet can verify only a number.
      if (!Number.isInteger(uid) || uid === 0) bad(`runAsUser ${uid} is not a non-zero uid`);
      if ((sc.runAsGroup ?? psc.runAsGroup) === 0) bad("runAsGroup is 0");
    })),
  rule("read-only-root", "every container has a read-only root file system", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      if (c.securityContext?.readOnlyRootFilesystem !== true) bad("readOnlyRootFilesystem is not true");
    })),
  rule("drop-all", "every container drops all capabilities and adds none", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      const caps = c.securityContext?.capabilities ?? {};
      if (!(caps.drop ?? []).includes("ALL")) bad("capabilities.drop lacks ALL");
      if ((caps.add ?? []).length) bad(`capabilities.add ${caps.add.join(",")}`);
    })),
  rule("no-escalation", "no container is privileged or may gain privileges", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      if (c.securityContext?.allowPrivilegeEscalation !== false) bad("allowPrivilegeEscalation is not false");
      if (c.securityContext?.privileged) bad("privileged");
    })),
  rule("seccomp", "every container runs under the RuntimeDefault seccomp profile", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      const t = c.securityContext?.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type;
      if (t !== "RuntimeDefault") bad(`seccompProfile ${t ?? "unset"}`);
    })),
  rule("host", "no pod shares the host's network, PID or IPC namespace, a host port or a host path", (objs) => {
    const out = [];
    for (const w of workloads(objs)) {
      const pod = podSpecOf(w);
      for (const f of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[f]) out.push(`${id(w)}: ${f}`);
      for (const v of pod.volumes ?? []) if (v.hostPath) out.push(`${id(w)}: hostPath volume ${v.name}`);
      for (const c of containers(w))
        for (const p of c.ports ?? []) if (p.hostPort) out.push(`${id(w)} container ${c.name}: hostPort ${p.hostPort}`);
    }
    return out;
  }),
  rule("resources", "every container has cpu and memory requests and limits, requests within limits", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      const req = c.resources?.requests ?? {};
      const lim = c.resources?.limits ?? {};
      for (const r of ["cpu", "memory"]) {
        if (req[r] === undefined) bad(`no ${r} request`);
        if (lim[r] === undefined) bad(`no ${r} limit`);
        if (req[r] !== undefined && lim[r] !== undefined && parseQuantity(req[r]) > parseQuantity(lim[r]))
          bad(`${r} request ${req[r]} above its limit ${lim[r]}`);
      }
      // Extended resources (GPUs) cannot be overcommitted: request = limit.
      for (const r of Object.keys({ ...req, ...lim }))
        if (r.includes("/") && String(req[r]) !== String(lim[r])) bad(`${r} request ${req[r]} != limit ${lim[r]}`);
    })),
  rule("grace", "terminationGracePeriodSeconds covers the drain timeout the pod's services use", (objs, d) => {
    const out = [];
    for (const w of workloads(objs)) {
      const pod = podSpecOf(w);
      const grace = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
      for (const c of pod.containers ?? []) {
        const v = envOf(objs, c).CORRAL_DRAIN_TIMEOUT;
        const drain = v === undefined ? d.drainMs : parseDurationMs(v);
        if (grace < drain)
          out.push(`${id(w)}: terminationGracePeriodSeconds ${grace / 1000} is below the drain timeout of ${c.name} (${drain / 1000} s)`);
      }
    }
    return out;
  }),
  rule("probes", "every container has readiness and liveness probes on its own ports; the gateway's readiness asks /api/health, its liveness /", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      for (const kind of ["readinessProbe", "livenessProbe"]) {
        const p = c[kind];
        if (!p) { bad(`no ${kind}`); continue; }
        const port = p.httpGet?.port ?? p.tcpSocket?.port;
        if (port !== undefined && !resolvePort(c, port)) bad(`${kind} port ${port} is not a port of the container`);
        if (!p.httpGet && !p.tcpSocket && !p.exec && !p.grpc) bad(`${kind} has no handler`);
      }
      if (component(w) === "gateway") {
        if (c.readinessProbe?.httpGet?.path !== "/api/health") bad("readinessProbe is not GET /api/health");
        if (c.livenessProbe?.httpGet?.path !== "/") bad("livenessProbe is not GET /");
      }
    })),
  rule("selectors", "selectors match the pod labels they are meant for", (objs) => {
    const out = [];
    const ws = workloads(objs);
    const some = (sel) => ws.some((w) => selects(sel, podLabels(w)));
    for (const w of ws) {
      if (w.kind === "Pod" || w.kind === "CronJob") continue;
      const sel = w.spec.selector;
      if (isEmptySelector(sel)) out.push(`${id(w)}: empty selector`);
      else if (!selects(sel, podLabels(w))) out.push(`${id(w)}: selector does not match its pod template's labels`);
      for (const t of w.spec.template.spec.affinity?.podAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [])
        if (!some(t.labelSelector)) out.push(`${id(w)}: podAffinity selects no pod`);
    }
    // Two workloads whose pods one selector takes for the other's.
    for (const a of ws)
      for (const b of ws)
        if (a !== b && a.spec?.selector && selects(a.spec.selector, podLabels(b)))
          out.push(`${id(a)}: its selector also matches the pods of ${id(b)}`);
    for (const o of objs) {
      if (o.kind === "Service" && o.spec.selector && !some({ matchLabels: o.spec.selector }))
        out.push(`${id(o)}: selector matches no pod`);
      if (o.kind === "PodDisruptionBudget" && !some(o.spec.selector)) out.push(`${id(o)}: selector matches no pod`);
      if (o.kind === "NetworkPolicy" && !isEmptySelector(o.spec.podSelector) && !some(o.spec.podSelector))
        out.push(`${id(o)}: podSelector matches no pod`);
      if (o.kind === "NetworkPolicy")
        for (const r of o.spec.ingress ?? [])
          for (const f of r.from ?? [])
            if (f.podSelector && !isEmptySelector(f.podSelector) && !some(f.podSelector))
              out.push(`${id(o)}: an ingress source matches no pod`);
      if (o.kind === "StatefulSet") {
        const s = objs.find((x) => x.kind === "Service" && x.metadata.name === o.spec.serviceName);
        if (!s) out.push(`${id(o)}: serviceName ${o.spec.serviceName} is no Service`);
        else if (s.spec.clusterIP !== "None") out.push(`${id(o)}: its serviceName ${s.metadata.name} is not headless`);
      }
    }
    return out;
  }),
  rule("references", "every Secret, ConfigMap (and key), claim, volume, service account and Service a manifest names exists", (objs) => {
    const out = [];
    const find = (kind, name) => objs.find((o) => o.kind === kind && o.metadata.name === name);
    for (const o of objs)
      forEachNameRef(o, (kind, holder, field) => {
        // An Ingress's TLS Secret comes from the operator or cert-manager
        // (overlays/ingress documents it), never from a manifest.
        if (o.kind === "Ingress") return;
        if (!find(kind, holder[field]) && !holder.optional) out.push(`${id(o)}: ${kind} ${holder[field]} does not exist`);
      });
    const claims = new Set(objs.filter((o) => o.kind === "PersistentVolumeClaim").map((o) => o.metadata.name));
    for (const s of objs.filter((o) => o.kind === "StatefulSet"))
      for (const t of s.spec.volumeClaimTemplates ?? [])
        for (let i = 0; i < (s.spec.replicas ?? 1); i++) claims.add(`${t.metadata.name}-${s.metadata.name}-${i}`);
    for (const w of workloads(objs)) {
      const pod = podSpecOf(w);
      const vols = new Set([...(pod.volumes ?? []).map((v) => v.name),
        ...(w.spec?.volumeClaimTemplates ?? []).map((t) => t.metadata.name)]);
      for (const v of pod.volumes ?? [])
        if (v.persistentVolumeClaim && !claims.has(v.persistentVolumeClaim.claimName))
          out.push(`${id(w)}: claim ${v.persistentVolumeClaim.claimName} does not exist`);
      const sa = pod.serviceAccountName;
      if (sa && sa !== "default" && !find("ServiceAccount", sa)) out.push(`${id(w)}: ServiceAccount ${sa} does not exist`);
      for (const c of containers(w)) {
        for (const m of c.volumeMounts ?? [])
          if (!vols.has(m.name)) out.push(`${id(w)} container ${c.name}: mount of an unknown volume ${m.name}`);
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef ?? e.valueFrom?.configMapKeyRef;
          if (!ref) continue;
          const kind = e.valueFrom.secretKeyRef ? "Secret" : "ConfigMap";
          const o = find(kind, ref.name);
          if (o && !(ref.key in (o.data ?? {})) && !(ref.key in (o.binaryData ?? {})))
            out.push(`${id(w)} container ${c.name}: ${kind} ${ref.name} has no key ${ref.key}`);
        }
      }
    }
    for (const ing of objs.filter((o) => o.kind === "Ingress"))
      for (const r of ing.spec.rules ?? [])
        for (const p of r.http?.paths ?? []) {
          const b = p.backend.service;
          const s = b && find("Service", b.name);
          if (!s) { out.push(`${id(ing)}: backend Service ${b?.name} does not exist`); continue; }
          if (!s.spec.ports.some((sp) => (b.port.name ? sp.name === b.port.name : sp.port === b.port.number)))
            out.push(`${id(ing)}: Service ${b.name} has no port ${b.port.name ?? b.port.number}`);
        }
    return out;
  }),
  rule("ports", "ports agree: corral's defaults, docs/deploy.md's table, each Service's targets, and the endpoints in each container's environment", (objs, d) => {
    const out = [];
    const ws = workloads(objs);
    const services = objs.filter((o) => o.kind === "Service");
    const backends = (s) => ws.filter((w) => s.spec.selector && selects({ matchLabels: s.spec.selector }, podLabels(w)));
    // The container port a Service port leads to in each pod it selects.
    const targets = (s, sp) => backends(s).map((w) => {
      const tp = sp.targetPort ?? sp.port;
      for (const c of containers(w)) { const p = resolvePort(c, tp); if (p) return p.containerPort; }
      return undefined;
    });
    for (const s of services)
      for (const sp of s.spec.ports ?? [])
        targets(s, sp).forEach((t) => {
          if (t === undefined) out.push(`${id(s)} port ${sp.name ?? sp.port}: targetPort ${sp.targetPort} is no container port`);
          else if (t !== sp.port) out.push(`${id(s)} port ${sp.name}: ${sp.port} leads to container port ${t}`);
        });
    for (const row of d.servicePorts) {
      const s = services.find((x) => x.metadata.name === row.service);
      const sp = s?.spec.ports?.find((p) => p.name === row.name);
      if (!sp) out.push(`docs/deploy.md lists ${row.service} ${row.name}, which no Service has`);
      else if (sp.port !== row.port) out.push(`${id(s)} port ${row.name} is ${sp.port}, docs/deploy.md says ${row.port}`);
    }
    const docPort = (svc, name) => d.servicePorts.find((r) => r.service === svc && r.name === name)?.port;
    if (docPort("corral-gateway", "http") !== d.gatewayPort)
      out.push(`the gateway's port in docs/deploy.md (${docPort("corral-gateway", "http")}) is not its default ${d.gatewayPort}`);
    if (docPort("corral-scheduler", "nodes") !== d.nodesPort)
      out.push(`the nodes port in docs/deploy.md's table is not the CORRAL_NODES_ENDPOINT example (${d.nodesPort})`);
    // Endpoints: a bind address is a port of the container itself; a
    // Service name is a Service with that port, leading to a container
    // port of the same number.
    for (const w of ws)
      for (const c of containers(w)) {
        const env = envOf(objs, c);
        for (const [k, v] of Object.entries(env)) {
          let host, port;
          const tcp = /^tcp:\/\/([^:/]+|\[[^\]]+\]):(\d+)$/.exec(v);
          if (tcp && (k.endsWith("_ENDPOINT") || k === "CORRAL_NODE_SCHEDULER")) [host, port] = [tcp[1], Number(tcp[2])];
          else if (k === "CORRAL_HOST" || k === "OLLAMA_HOST") {
            const h = /^(?:https?:\/\/)?([^:/]+|\[[^\]]+\]):(\d+)$/.exec(v);
            if (!h) { out.push(`${id(w)} container ${c.name}: ${k}=${v} has no port`); continue; }
            [host, port] = [h[1], Number(h[2])];
          } else continue;
          if (["0.0.0.0", "*", "[::]"].includes(host)) {
            if (!(c.ports ?? []).some((p) => p.containerPort === port))
              out.push(`${id(w)} container ${c.name}: ${k} binds port ${port}, which is not a containerPort`);
            continue;
          }
          const s = services.find((x) => x.metadata.name === host.split(".")[0]);
          const sp = s?.spec.ports?.find((p) => p.port === port);
          if (!sp) { out.push(`${id(w)} container ${c.name}: ${k}=${v}: no Service ${host} with port ${port}`); continue; }
          // The pods behind it bind the matching endpoint on that port.
          const bindVar = BIND_OF[k];
          if (!bindVar) continue;
          for (const b of backends(s)) {
            const tp = sp.targetPort ?? sp.port;
            const bc = containers(b).find((x) => resolvePort(x, tp));
            const cp = bc && resolvePort(bc, tp).containerPort;
            const bound = bc && /:(\d+)$/.exec(envOf(objs, bc)[bindVar] ?? "");
            if (!bound || Number(bound[1]) !== cp)
              out.push(`${id(w)} container ${c.name}: ${k}=${v} leads to ${id(b)} port ${cp}, where it does not bind ${bindVar}`);
          }
        }
      }
    return out;
  }),
  rule("network", "NetworkPolicies deny ingress by default and admit traffic from outside the namespace only to the gateway", (objs) => {
    const out = [];
    const pols = objs.filter((o) => o.kind === "NetworkPolicy");
    const ingressPol = (p) => (p.spec.policyTypes ?? ["Ingress"]).includes("Ingress");
    if (!pols.some((p) => isEmptySelector(p.spec.podSelector) && ingressPol(p) && !(p.spec.ingress ?? []).length))
      out.push("no NetworkPolicy denies all ingress by default (podSelector {}, no ingress rules)");
    for (const w of workloads(objs)) {
      if (component(w) === "gateway") continue;
      for (const p of pols.filter((q) => ingressPol(q) && (isEmptySelector(q.spec.podSelector) || selects(q.spec.podSelector, podLabels(w)))))
        for (const r of p.spec.ingress ?? []) {
          const from = r.from ?? [];
          if (!from.length) out.push(`${id(p)}: admits any source to ${id(w)}`);
          for (const f of from)
            if (f.ipBlock || f.namespaceSelector || isEmptySelector(f.podSelector))
              out.push(`${id(p)}: admits sources beyond corral's own pods to ${id(w)}`);
        }
    }
    for (const s of objs.filter((o) => o.kind === "Service"))
      if (["NodePort", "LoadBalancer"].includes(s.spec.type) || (s.spec.externalIPs ?? []).length) {
        const gw = workloads(objs).some((w) => component(w) === "gateway" && s.spec.selector && selects({ matchLabels: s.spec.selector }, podLabels(w)));
        if (!gw) out.push(`${id(s)}: type ${s.spec.type} exposes a pod that is not the gateway`);
      }
    return out;
  }),
  rule("mounts", "writable mounts are only emptyDirs with a size limit or claims; keys and settings are mounted read-only", (objs) =>
    perContainer(objs, (w, pod, c, bad) => {
      for (const m of c.volumeMounts ?? []) {
        const v = (pod.volumes ?? []).find((x) => x.name === m.name);
        if (!v) continue; // a volumeClaimTemplate: a claim
        if (v.secret || v.configMap || v.projected) {
          if (!m.readOnly) bad(`${m.name} (${v.secret ? "Secret" : "ConfigMap"}) is not mounted readOnly`);
        } else if (v.emptyDir) {
          if (!v.emptyDir.sizeLimit) bad(`emptyDir ${m.name} has no sizeLimit`);
        } else if (!v.persistentVolumeClaim) bad(`${m.name} is neither an emptyDir nor a claim`);
      }
    })),
  rule("topology", "scheduler: one replica, Recreate, reads the registry's store; registry: a StatefulSet with a claim; node: a DaemonSet on GPU nodes, its cache bounded below its volume", (objs) => {
    const out = [];
    const ws = workloads(objs);
    const by = (c) => ws.filter((w) => component(w) === c);
    const [sch] = by("scheduler");
    const [reg] = by("registry");
    const nodes = by("node");
    const gws = by("gateway");
    if (!sch || !reg || !nodes.length || !gws.length) return ["a gateway, scheduler, registry and node workload must all exist"];
    if (sch.kind !== "Deployment" || sch.spec.replicas !== 1 || sch.spec.strategy?.type !== "Recreate")
      out.push(`${id(sch)}: must be a Deployment of 1 replica with strategy Recreate`);
    if (gws.some((g) => g.kind !== "Deployment")) out.push("the gateway must be a Deployment");
    if (reg.kind !== "StatefulSet" || !(reg.spec.volumeClaimTemplates ?? []).length)
      out.push(`${id(reg)}: must be a StatefulSet with a volumeClaimTemplate`);
    else {
      const tmpl = reg.spec.volumeClaimTemplates[0].metadata.name;
      const rc = reg.spec.template.spec.containers[0];
      const store = envOf(objs, rc).CORRAL_MODELS;
      const rm = (rc.volumeMounts ?? []).find((m) => m.name === tmpl);
      if (!rm || rm.mountPath !== store) out.push(`${id(reg)}: the claim ${tmpl} is not mounted at CORRAL_MODELS (${store})`);
      // The scheduler serves blobs from the paths the registry resolves.
      const claim = `${tmpl}-${reg.metadata.name}-0`;
      const sv = (sch.spec.template.spec.volumes ?? []).find((v) => v.persistentVolumeClaim?.claimName === claim);
      const sc = sch.spec.template.spec.containers[0];
      const sm = sv && (sc.volumeMounts ?? []).find((m) => m.name === sv.name);
      if (!sm || sm.mountPath !== store || !sm.readOnly)
        out.push(`${id(sch)}: does not mount ${claim} read-only at ${store}`);
      const rwo = (reg.spec.volumeClaimTemplates[0].spec.accessModes ?? []).includes("ReadWriteOnce");
      const aff = sch.spec.template.spec.affinity?.podAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
      if (rwo && !aff.some((t) => t.topologyKey === "kubernetes.io/hostname" && selects(t.labelSelector, podLabels(reg))))
        out.push(`${id(sch)}: a ReadWriteOnce store needs podAffinity to the registry's node`);
    }
    for (const n of nodes) {
      const pod = podSpecOf(n);
      if (n.kind !== "DaemonSet") out.push(`${id(n)}: must be a DaemonSet`);
      const gpuNodes = Object.keys(pod.nodeSelector ?? {}).some((k) => k.startsWith("nvidia.com/")) ||
        JSON.stringify(pod.affinity?.nodeAffinity ?? {}).includes("nvidia.com/");
      if (!gpuNodes) out.push(`${id(n)}: no nodeSelector or nodeAffinity for a GPU label`);
      const c = pod.containers[0];
      if (!c.resources?.limits?.["nvidia.com/gpu"]) out.push(`${id(n)}: no nvidia.com/gpu limit`);
      const env = envOf(objs, c);
      const m = (c.volumeMounts ?? []).find((x) => x.mountPath === env.CORRAL_NODE_CACHE);
      const v = m && (pod.volumes ?? []).find((x) => x.name === m.name);
      if (!v) out.push(`${id(n)}: no volume at CORRAL_NODE_CACHE (${env.CORRAL_NODE_CACHE})`);
      else if (v.emptyDir) {
        if (env.CORRAL_NODE_CACHE_MAX === undefined) out.push(`${id(n)}: the cache is an emptyDir but CORRAL_NODE_CACHE_MAX is unset`);
        else if (!v.emptyDir.sizeLimit || parseCorralSize(env.CORRAL_NODE_CACHE_MAX) >= parseQuantity(v.emptyDir.sizeLimit))
          out.push(`${id(n)}: CORRAL_NODE_CACHE_MAX ${env.CORRAL_NODE_CACHE_MAX} is not below the cache volume's sizeLimit ${v.emptyDir.sizeLimit}`);
      }
      for (const k of ["CORRAL_NODE_CERT", "CORRAL_NODE_SERVER_CERT"]) {
        const dir = env[k]?.replace(/\/[^/]+$/, "");
        const km = (c.volumeMounts ?? []).find((x) => x.mountPath === dir);
        const kv = km && (pod.volumes ?? []).find((x) => x.name === km.name);
        if (!kv?.secret) out.push(`${id(n)}: ${k} (${env[k]}) is not in a mounted Secret`);
      }
    }
    return out;
  }),
];

export function check(objs, defaults) {
  const out = [];
  for (const r of RULES) for (const v of r.check(objs, defaults)) out.push(`[${r.name}] ${v}`);
  return out;
}
