import type { NamedTransaction } from '../engines/transactions.js';
import { SET_ASIDE_LOG_STEP } from '../log/set-aside.js';

/**
 * The transactions that read before they write (`runNamedTransaction`): a connection that does not
 * write sends one by name, and the storage thread runs it whole. A new one is one more entry here.
 */
export const WRITER_TRANSACTIONS: readonly NamedTransaction<never, unknown>[] = [SET_ASIDE_LOG_STEP];
