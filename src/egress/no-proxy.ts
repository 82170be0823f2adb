import { BlockList, isIP } from 'node:net';

/**
 * NO_PROXY as curl reads it: a list (commas or spaces) of host names, which also match their
 * subdomains (a leading `.` or `*.` is the same), IP addresses and CIDR ranges (IPv6 without
 * brackets), or `*` for every host. Names are compared without case and without a trailing dot;
 * IPs match as addresses only (127.0.0.1 does not match localhost, nor loopback at large).
 * Returns whether a request to `host` (a URL's hostname) must go straight rather than through a proxy.
 */
export function noProxyMatcher(list: string | undefined): (host: string) => boolean {
  const entries = (list ?? '').split(/[\s,]+/).filter(Boolean);
  if (entries.includes('*')) return () => true;
  const addresses = new BlockList();
  const names: string[] = [];
  for (const entry of entries) {
    const cidr = /^\[?([^\]/]+)\]?(?:\/(\d{1,3}))?$/.exec(entry);
    const family = cidr ? isIP(cidr[1] as string) : 0;
    if (cidr && family !== 0) {
      const type = family === 4 ? 'ipv4' : 'ipv6';
      const prefix = cidr[2] === undefined ? undefined : Number(cidr[2]);
      if (prefix === undefined) addresses.addAddress(cidr[1] as string, type);
      else if (prefix <= (family === 4 ? 32 : 128)) addresses.addSubnet(cidr[1] as string, prefix, type);
      continue;
    }
    const name = normalName(entry.replace(/^\*?\./, ''));
    if (name !== '') names.push(name);
  }
  return (host) => {
    const bare = host.replace(/^\[(.*)\]$/, '$1');
    const family = isIP(bare);
    if (family !== 0) return addresses.check(bare, family === 4 ? 'ipv4' : 'ipv6');
    const name = normalName(bare);
    return names.some((entry) => name === entry || name.endsWith(`.${entry}`));
  };
}

const normalName = (name: string): string => name.toLowerCase().replace(/\.$/, '');
