import { PostgresDialect, sql, type DatabaseIntrospector, type Kysely, type SchemaMetadata, type TableMetadata } from 'kysely';

/**
 * What Kysely's migrator asks of PostgreSQL (do its own tables exist?), answered from the relay's
 * schema (`current_schema()`, as the migrator is pinned to) alone. Kysely's own introspector lists
 * every table of every schema on the server, looking each schema up by name again as it goes: on a
 * server shared with other applications, a schema one of them drops meanwhile fails the relay's
 * start (`schema ... does not exist`), and every schema on the server adds to each start.
 */
export class RelaySchemaIntrospector implements DatabaseIntrospector {
  constructor(private readonly db: Kysely<unknown>) {}

  async getSchemas(): Promise<SchemaMetadata[]> {
    const { rows } = await sql<SchemaMetadata>`SELECT coalesce(current_schema(), 'public') AS name`.execute(this.db);
    return rows;
  }

  async getTables(): Promise<TableMetadata[]> {
    const { rows } = await sql<{ name: string; schema: string; kind: string }>`
      SELECT c.relname AS name, n.nspname AS schema, c.relkind AS kind
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = coalesce(current_schema(), 'public') AND c.relkind IN ('r', 'v', 'p')`.execute(this.db);
    // The migrator only looks for a table's name in its schema: no columns are read.
    return rows.map(({ name, schema, kind }) => ({ name, schema, isView: kind === 'v', columns: [] }));
  }

  async getMetadata(): Promise<{ tables: TableMetadata[] }> {
    return { tables: await this.getTables() };
  }
}

/** PostgreSQL, introspected by `RelaySchemaIntrospector`. */
export class RelayPostgresDialect extends PostgresDialect {
  override createIntrospector(db: Kysely<unknown>): DatabaseIntrospector {
    return new RelaySchemaIntrospector(db);
  }
}
