// What a hook attempt sent and was answered, as an operator reads it (contract section 16): written
// by the hook sink, kept with the attempt by the store.

/** What a hook sent: its URL and headers (configured extra headers' values redacted, no signature). */
export interface ExchangeRequest {
  url: string;
  headers: Record<string, string>;
}

/** What a hook answered: its headers and the first bytes of its body, as text. */
export interface ExchangeResponse {
  headers: Record<string, string>;
  body: string;
  bodyTruncated: boolean;
}
