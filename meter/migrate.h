/* meter: schema migrations from sql/, compiled into the binary. */
#ifndef METER_MIGRATE_H
#define METER_MIGRATE_H

#include <libpq-fe.h>
#include <stddef.h>

#include "rc.h"

struct migration_src {
	int version;	  /* from the file name, NNNN_ */
	const char *name; /* file name without ".sql" */
	const char *sql;  /* the file's text */
};

/* Generated from sql/ at build time, ordered by version. */
extern const struct migration_src migrations_src[];
extern const int migrations_count;

/* Applies every migration not yet recorded in schema_migrations, in order,
 * into db_schema() (made when missing; METER_ECONFLICT, with err, when it
 * holds no schema_migrations and migrate_elsewhere finds meter's tables in
 * another schema: migrating would start an empty second set of them),
 * each in its own transaction together with its row in schema_migrations
 * (version, name, sha256 of the text, applied_at). A transaction-scoped
 * advisory lock serialises concurrent migrators. A recorded migration whose
 * text changed since it was applied, or one this binary does not have, is
 * METER_ECONFLICT. *applied gets the number applied by this call (0 when
 * the schema is current). err gets a one-line reason on failure, and for a
 * conflict what to do. */
METER_MUSTCHECK enum meter_rc migrate_apply(PGconn *conn, int *applied, char *err, size_t errlen);

/* The name of a schema other than db_schema() that holds meter's tables
 * (schema_migrations and key_day_ledger) into out, the first by name;
 * "" when there is none. METER_EDB when the catalog cannot be read. */
METER_MUSTCHECK enum meter_rc migrate_elsewhere(PGconn *conn, char *out, size_t outlen);

/* The version of the last compiled migration: the schema this binary
 * needs. */
int migrate_latest(void);

/* *version = the last migration schema_migrations records, 0 for a
 * database never migrated (no such table). METER_EDB when it cannot be
 * read. */
METER_MUSTCHECK enum meter_rc migrate_version(PGconn *conn, int *version);

/* migrate_version, and what schema_migrations records of the versions this
 * binary has compared with its own migrations: METER_ECONFLICT, with err
 * (what differs and what to do), when one it records is not this binary's
 * or its text differs, or one of this binary's below the newest recorded
 * is missing (the database was migrated by another build). METER_ENOMEM, with err, when the
 * compiled migrations cannot be hashed. Versions past this binary's are left to the caller, which
 * compares *version with migrate_latest(). METER_EDB when it cannot be read. */
METER_MUSTCHECK enum meter_rc migrate_verify(PGconn *conn, int *version, char *err, size_t errlen);

#endif
