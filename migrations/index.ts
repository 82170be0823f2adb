import type { Migration } from 'kysely';
import * as initial from './001_initial.js';
import * as pruneIndex from './002_prune_index.js';
import * as outboxLanes from './003_outbox_lanes.js';
import * as reconcile from './004_reconcile.js';
import * as fanoutOrderPause from './005_fanout_order_pause.js';
import * as traceContext from './006_trace_context.js';
import * as dropDoneRows from './007_drop_done_rows.js';
import * as deliveriesTypeIndex from './008_deliveries_type_index.js';
import * as keptOutcomes from './009_kept_outcomes.js';
import * as operatorOrigin from './010_operator_origin.js';
import * as auditAndSinkMinutes from './011_audit_and_sink_minutes.js';
import * as deliveryLog from './012_delivery_log.js';
import * as logPositions from './013_log_positions.js';
import * as attempts from './014_attempts.js';
import * as boxSeenUnindexed from './015_box_seen_unindexed.js';
import * as logDeletions from './016_log_deletions.js';
import * as attemptsBeyondKept from './017_attempts_beyond_kept.js';
import * as attemptMinutes from './018_attempt_minutes.js';
import * as oneLiveRow from './019_one_live_row.js';
import * as unrecordedRouting from './020_unrecorded_routing.js';
import * as cursorMovesInPlace from './021_cursor_moves_in_place.js';
import * as fencingEpochs from './022_fencing_epochs.js';
import * as archiveLedger from './023_archive_ledger.js';
import * as accountsRunsAndSecrets from './024_accounts_runs_and_secrets.js';

/**
 * Every migration, in order. Listed statically rather than read from the folder so the same list
 * runs from compiled JavaScript and under the test runner; add new files here.
 */
export const migrations: Record<string, Migration> = {
  '001_initial': initial,
  '002_prune_index': pruneIndex,
  '003_outbox_lanes': outboxLanes,
  '004_reconcile': reconcile,
  '005_fanout_order_pause': fanoutOrderPause,
  '006_trace_context': traceContext,
  '007_drop_done_rows': dropDoneRows,
  '008_deliveries_type_index': deliveriesTypeIndex,
  '009_kept_outcomes': keptOutcomes,
  '010_operator_origin': operatorOrigin,
  '011_audit_and_sink_minutes': auditAndSinkMinutes,
  '012_delivery_log': deliveryLog,
  '013_log_positions': logPositions,
  '014_attempts': attempts,
  '015_box_seen_unindexed': boxSeenUnindexed,
  '016_log_deletions': logDeletions,
  '017_attempts_beyond_kept': attemptsBeyondKept,
  '018_attempt_minutes': attemptMinutes,
  '019_one_live_row': oneLiveRow,
  '020_unrecorded_routing': unrecordedRouting,
  '021_cursor_moves_in_place': cursorMovesInPlace,
  '022_fencing_epochs': fencingEpochs,
  '023_archive_ledger': archiveLedger,
  '024_accounts_runs_and_secrets': accountsRunsAndSecrets,
};
