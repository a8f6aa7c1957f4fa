/* meter: the schema gate. meterd does no work on a database whose schema
 * is not the one its own migrations make: not yet migrated (a new meterd
 * started before meterctl migrate), migrated by a newer build (an old
 * meterd left running across an upgrade), or by another build whose
 * migrations differ. Its statements would fail there, or, worse, run on
 * tables and functions they were not written for.
 *
 * A thread of its own reads the schema once a second on a connection of
 * its own; requests that need the database (api/server.c), the lease-end
 * sweeper, the webhook deliverer and the collector ask schema_gate_open()
 * before they work, which costs a lock and a copy. The gate stays as last
 * read while the database is down (an outage does not change the schema).
 * Until its first read it is closed, so nothing works on a schema not yet
 * seen; with no gate started (meterctl, tests of the library) it is open. */
#ifndef METER_SCHEMA_GATE_H
#define METER_SCHEMA_GATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rc.h"

#define SCHEMA_WHY_MAX 600

/* What a database's schema says of this binary. */
struct schema_state {
	int have;	    /* the newest migration it records (0: none) */
	int want;	    /* migrate_latest(): this binary's */
	bool matches;	    /* the schema is this binary's: work may go on */
	bool versions;	    /* why is about the versions: have and want are worth reporting */
	int64_t begun_usec; /* clock_mono_usec() as the reading began: the newer of two wins */
	char why[SCHEMA_WHY_MAX]; /* when it does not match: what is wrong and what to do */
};

/* Reads the schema on conn into *st (h_readyz's reading, and the gate's).
 * METER_EDB when it cannot be read (st->why says why), METER_ENOMEM when
 * this binary's migrations cannot be hashed. */
METER_MUSTCHECK enum meter_rc schema_read(PGconn *conn, struct schema_state *st);

/* schema_read with its lock waits given up after a second, as the gate's
 * own readings are (a session holding schema_migrations locked, a migration
 * under way): for a pooled connection, whose session's lock_timeout is put
 * back after. */
METER_MUSTCHECK enum meter_rc schema_read_briefly(PGconn *conn, struct schema_state *st);

/* Starts the gate's thread on url, whose statements stop after
 * statement_timeout_ms. METER_ENOMEM or METER_EIO when it cannot start.
 * Once per process. */
METER_MUSTCHECK enum meter_rc schema_gate_start(const char *url, int64_t statement_timeout_ms);

/* Waits up to ms for the gate's first reading; true once there is one. */
bool schema_gate_wait(int64_t ms);

/* Stops the thread; the gate stays as it was last read. */
void schema_gate_stop(void);

/* Whether work that needs the database may go on: no gate started, or
 * the last reading matched. When it may not, why (when not NULL) gets
 * what is wrong and what to do. */
bool schema_gate_open(char *why, size_t whylen);

/* A reading made elsewhere (h_readyz, on a request): taken as the gate's
 * newest, so a schema put right is served at once, unless it began before
 * the one the gate holds (a reading held up on its way here does not undo
 * a later one). */
void schema_gate_note(const struct schema_state *st);

#endif
