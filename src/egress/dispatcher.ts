import { Agent, Pool, ProxyAgent, fetch as undiciFetch, type Dispatcher } from 'undici';
import { noProxyMatcher } from './no-proxy.js';
import type { ProxyRoute } from './proxy-env.js';

/** PEM contents for TLS to the receiver: a CA to trust instead of the system's, a client certificate and key. */
export interface TlsMaterial {
  ca?: string | undefined;
  cert?: string | undefined;
  key?: string | undefined;
}

/** The proxy a request to `url` goes through (contract section 14), or undefined for a direct one. */
export function proxyFor(route: ProxyRoute, url: URL): string | undefined {
  if (route.kind === 'direct') return undefined;
  if (route.kind === 'proxy') return route.url;
  const proxy = url.protocol === 'https:' ? route.env.httpsProxy : route.env.httpProxy;
  if (proxy === undefined || noProxyMatcher(route.env.noProxy)(url.hostname)) return undefined;
  return proxy;
}

/**
 * An undici dispatcher that sends each origin's requests straight or through its proxy, decided
 * once per origin: an HTTPS receiver is reached by CONNECT through the proxy, an HTTP one as an
 * absolute-form request to it. `tls` applies to the receiver's connection either way.
 */
export function createEgressDispatcher(route: ProxyRoute, tls: TlsMaterial = {}): Dispatcher {
  return new Agent({
    connect: tls,
    factory: (origin, options) => {
      const target = new URL(String(origin));
      const proxy = proxyFor(route, target);
      if (proxy === undefined) return new Pool(origin, options);
      return new ProxyAgent({ uri: proxy, requestTls: tls, proxyTunnel: target.protocol === 'https:' });
    },
  });
}

/** fetch through a dispatcher (undici's own fetch: Node's bundled one may be another undici major). */
export function fetchThrough(dispatcher: Dispatcher): typeof fetch {
  return ((input: string | URL, init?: RequestInit) =>
    undiciFetch(input, { ...(init as Parameters<typeof undiciFetch>[1]), dispatcher })) as unknown as typeof fetch;
}
