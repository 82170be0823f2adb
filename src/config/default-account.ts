/**
 * The account of contract section 1, the one every relay has (contract section 21): no configured
 * account may take its name. A module of its own, so storage and verification import it without the schema.
 */
export const DEFAULT_ACCOUNT = 'default';

/** Where an account's deliveries are posted: `/webhooks` for `default`, `/webhooks/<name>` for the others. */
export const endpointOf = (name: string): string => (name === DEFAULT_ACCOUNT ? '/webhooks' : `/webhooks/${name}`);
