import { X509Certificate } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import type { TlsMaterial } from './dispatcher.js';

/** A hook's `tls` setting: file paths. */
export interface TlsFiles {
  ca?: string | undefined;
  cert?: string | undefined;
  key?: string | undefined;
}

const CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/**
 * Reads a hook's TLS files and checks they are usable: the CA file holds at least one certificate,
 * each one valid; the client certificate and key come together and belong together. Problems are
 * returned as lines naming the hook and the file (never its contents), for a configuration error.
 */
export function readTlsFiles(hook: string, files: TlsFiles, readFile: (path: string) => string): { material: TlsMaterial; problems: string[] } {
  const problems: string[] = [];
  const problem = (field: keyof TlsFiles, message: string) => problems.push(`hook ${hook}: tls.${field} (${files[field]}): ${message}`);
  const read = (field: keyof TlsFiles): string | undefined => {
    const path = files[field];
    if (path === undefined) return undefined;
    try {
      return readFile(path);
    } catch (error) {
      problem(field, `cannot read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
      return undefined;
    }
  };
  const material: TlsMaterial = { ca: read('ca'), cert: read('cert'), key: read('key') };
  if (material.ca !== undefined) {
    const certificates = material.ca.match(CERTIFICATE) ?? [];
    if (certificates.length === 0) problem('ca', 'holds no PEM certificate');
    try {
      certificates.forEach((pem) => new X509Certificate(pem));
    } catch {
      problem('ca', 'holds a certificate that cannot be read');
    }
  }
  if ((files.cert === undefined) !== (files.key === undefined)) {
    problems.push(`hook ${hook}: tls.cert and tls.key go together (a client certificate and its private key)`);
  } else if (material.cert !== undefined && material.key !== undefined) {
    try {
      createSecureContext({ cert: material.cert, key: material.key });
    } catch (error) {
      problems.push(`hook ${hook}: tls.cert and tls.key: not a PEM certificate and its private key (${(error as { code?: string }).code ?? 'invalid'})`);
    }
  }
  return { material, problems };
}
