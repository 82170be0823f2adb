/** The proxy variables of contract section 14, each read in lower or upper case. */
export interface ProxyEnv {
  httpProxy?: string | undefined;
  httpsProxy?: string | undefined;
  noProxy?: string | undefined;
}

/** Lower case wins when both spellings are set (curl's order); an empty value counts as unset. */
const either = (env: NodeJS.ProcessEnv, name: string): string | undefined =>
  [env[name.toLowerCase()], env[name.toUpperCase()]].find((value) => value !== undefined && value.trim() !== '')?.trim();

export function proxyEnvOf(env: NodeJS.ProcessEnv): ProxyEnv {
  return { httpProxy: either(env, 'http_proxy'), httpsProxy: either(env, 'https_proxy'), noProxy: either(env, 'no_proxy') };
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
