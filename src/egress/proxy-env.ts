/** The proxy variables of contract section 14, each read in lower or upper case. */
export interface ProxyEnv {
  httpProxy?: string | undefined;
  httpsProxy?: string | undefined;
  noProxy?: string | undefined;
}

/** Lower case wins when both spellings are set (curl's order); an empty value counts as unset. */
const either = (env: NodeJS.ProcessEnv, name: string): string | undefined =>
  [env[name.toLowerCase()], env[name.toUpperCase()]].find((value) => value !== undefined && value.trim() !== '')?.trim();

/** A proxy given without a scheme (`proxy.corp:3128`) is an HTTP proxy, as curl takes it. */
const withScheme = (proxy: string | undefined): string | undefined => (proxy === undefined || proxy.includes('://') ? proxy : `http://${proxy}`);

export function proxyEnvOf(env: NodeJS.ProcessEnv): ProxyEnv {
  return { httpProxy: withScheme(either(env, 'http_proxy')), httpsProxy: withScheme(either(env, 'https_proxy')), noProxy: either(env, 'no_proxy') };
}

/** A proxy variable that is not an http(s) URL, named for a configuration error (the value may hold credentials: not shown). */
export function proxyEnvProblems(proxyEnv: ProxyEnv): string[] {
  const problems: string[] = [];
  for (const [name, value] of [['HTTPS_PROXY', proxyEnv.httpsProxy], ['HTTP_PROXY', proxyEnv.httpProxy]] as const) {
    if (value === undefined) continue;
    let url: URL | undefined;
    try {
      url = new URL(value);
    } catch {
      url = undefined;
    }
    if (url === undefined || !['http:', 'https:'].includes(url.protocol) || url.hostname === '') {
      problems.push(`${name} (or ${name.toLowerCase()}): expected a proxy URL such as http://proxy.example:3128 (the value is not shown)`);
    }
  }
  return problems;
}

/**
 * Where one hook's (or the upstream client's) requests go: through the proxy the variables name for
 * the URL's scheme unless NO_PROXY lists the host, through one given proxy, or straight.
 */
export type ProxyRoute = { kind: 'env'; env: ProxyEnv } | { kind: 'proxy'; url: string } | { kind: 'direct' };

/** A hook's `proxy` setting (absent: the variables). */
export function proxyRouteOf(setting: string | undefined, env: ProxyEnv): ProxyRoute {
  if (setting === undefined) return { kind: 'env', env };
  return setting === 'direct' ? { kind: 'direct' } : { kind: 'proxy', url: setting };
}
