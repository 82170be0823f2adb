import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCertificates {
  dir: string;
  /** The CA (PEM) that signed the server and client certificates. */
  ca: string;
  /** The server's certificate and key, for 127.0.0.1 and localhost. */
  cert: string;
  key: string;
  /** A client certificate and key signed by the same CA (mutual TLS). */
  clientCert: string;
  clientKey: string;
  /** Another CA, which signed nothing here. */
  otherCa: string;
}

/** A CA, a server certificate for 127.0.0.1 (and localhost) and a client certificate signed by it, and an unrelated CA: made with openssl for the test. */
export function testCertificates(): TestCertificates {
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-tls-'));
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=boxrelay test CA');
  openssl('req', '-x509', ...ec, '-keyout', 'other-ca.key', '-out', 'other-ca.pem', '-days', '1', '-subj', '/CN=another CA');
  const signed = (name: string, subject: string, extensions: string) => {
    openssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject);
    writeFileSync(file(`${name}.ext`), extensions);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.pem`, '-days', '1', '-extfile', `${name}.ext`);
  };
  // Clients check a server reached by IP address under its IP (hooks) or the name `localhost` (NATS).
  signed('server', '/CN=127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  signed('client', '/CN=boxrelay', 'extendedKeyUsage=clientAuth\n');
  return {
    dir,
    ca: file('ca.pem'),
    cert: file('server.pem'),
    key: file('server.key'),
    clientCert: file('client.pem'),
    clientKey: file('client.key'),
    otherCa: file('other-ca.pem'),
  };
}
