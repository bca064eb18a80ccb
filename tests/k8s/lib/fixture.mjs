// fixture.mjs: a rendering of deploy/k8s to test. The kustomization reads
// its keys from base/keys/, which is never committed, so each test copies
// deploy/k8s into a temp dir and writes the keys there: with the real
// `corral-node keygen` when the build has it (CORRAL_BUILD_DIR), else
// stand-in files of the same names (the rules do not read key contents).
import { cpSync, existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export const SOURCE_DIR = process.env.CORRAL_SOURCE_DIR
  ? resolve(process.env.CORRAL_SOURCE_DIR)
  : resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const K8S_DIR = join(SOURCE_DIR, "deploy/k8s");
// Every kustomization a user may apply: the base and each overlay.
export const TARGETS = ["base", "overlays/nvidia-runtime", "overlays/ingress"];

export function keygenBin() {
  const b = process.env.CORRAL_BUILD_DIR && join(process.env.CORRAL_BUILD_DIR, "bin/corral-node");
  return b && existsSync(b) ? b : null;
}

// Returns { dir, keygen, cleanup }: dir is the copy of deploy/k8s.
export function preparedCopy() {
  const tmp = mkdtempSync(join(tmpdir(), "corral-k8s-"));
  const dir = join(tmp, "k8s");
  cpSync(K8S_DIR, dir, { recursive: true, filter: (src) => !src.endsWith("/base/keys") });
  const keys = join(dir, "base/keys");
  mkdirSync(keys);
  const bin = keygenBin();
  for (const name of ["scheduler", "node"]) {
    if (bin) execFileSync(bin, ["keygen", "--out", keys, name], { stdio: "pipe" });
    else {
      writeFileSync(join(keys, name), `stand-in public certificate ${name}\n`);
      writeFileSync(join(keys, `${name}_secret`), `stand-in secret certificate ${name}\n`);
    }
  }
  writeFileSync(join(keys, "api-key.env"), "CORRAL_API_KEY=0123456789abcdef\n");
  return { dir, keygen: !!bin, cleanup: () => rmSync(tmp, { recursive: true, force: true }) };
}
