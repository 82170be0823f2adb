import {
  DEFAULT_MIGRATION_LOCK_TABLE,
  DEFAULT_MIGRATION_TABLE,
  PostgresDialect,
  sql,
  type DatabaseIntrospector,
  type DatabaseMetadataOptions,
  type Kysely,
  type SchemaMetadata,
  type TableMetadata,
} from 'kysely';

/**
 * The relay's schema: the first of the connection's search_path that exists, else `public`. The
 * migrator is pinned to it (migrate.ts) and this introspector answers from it, by this one rule.
 */
export const RELAY_SCHEMA = sql<string>`coalesce(current_schema(), 'public')`;

/**
 * What Kysely's migrator asks of PostgreSQL (do its own tables exist?), answered from the relay's
 * schema (`RELAY_SCHEMA`) alone. Kysely's own introspector lists
 * every table of every schema on the server, looking each schema up by name again as it goes: on a
 * server shared with other applications, a schema one of them drops meanwhile fails the relay's
 * start (`schema ... does not exist`), and every schema on the server adds to each start.
 */
export class RelaySchemaIntrospector implements DatabaseIntrospector {
  constructor(private readonly db: Kysely<unknown>) {}

  /** The relay's schema, when it exists (`current_schema()` names the first of the search_path that does). */
  async getSchemas(): Promise<SchemaMetadata[]> {
    const { rows } = await sql<SchemaMetadata>`
      SELECT nspname AS name FROM pg_catalog.pg_namespace WHERE nspname = ${RELAY_SCHEMA}`.execute(this.db);
    return rows;
  }

  /** The relay schema's tables and views by name; the migrator reads no columns, so none are listed. */
  async getTables(options: DatabaseMetadataOptions = { withInternalKyselyTables: false }): Promise<TableMetadata[]> {
    const { rows } = await sql<{ name: string; schema: string; kind: string }>`
      SELECT c.relname AS name, n.nspname AS schema, c.relkind AS kind
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ${RELAY_SCHEMA} AND c.relkind IN ('r', 'v', 'p')`.execute(this.db);
    const kyselys = [DEFAULT_MIGRATION_TABLE, DEFAULT_MIGRATION_LOCK_TABLE];
    return rows
      .filter(({ name }) => options.withInternalKyselyTables || !kyselys.includes(name))
      .map(({ name, schema, kind }) => ({ name, schema, isView: kind === 'v', columns: [] }));
  }

  async getMetadata(options?: DatabaseMetadataOptions): Promise<{ tables: TableMetadata[] }> {
    return { tables: await this.getTables(options) };
  }
}

/** PostgreSQL, introspected by `RelaySchemaIntrospector`. */
export class RelayPostgresDialect extends PostgresDialect {
  override createIntrospector(db: Kysely<unknown>): DatabaseIntrospector {
    return new RelaySchemaIntrospector(db);
  }
}
