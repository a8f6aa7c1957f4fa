/* meter: the schema gate (see schema_gate.h). */
#include "schema_gate.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "db.h"
#include "db_util.h"
#include "log.h"
#include "migrate.h"

#define GATE_INTERVAL_MS 1000 /* between two readings, and two attempts to connect */
/* The longest a reading waits for a lock (a session that locked
 * schema_migrations): the gate stays as it was meanwhile. */
#define GATE_LOCK_MS "1000"

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv;
static pthread_t gate_thread;
static bool gate_started, gate_stopping, gate_read, gate_matched;
static PGcancel *gate_cancel; /* the thread's connection's, for schema_gate_stop */
static int gate_sock = -1;    /* a copy of its socket (never another's number), likewise */
static bool gate_reading;     /* a reading is under way on it */
static struct schema_state gate_state;
/* !gate_started || (gate_read && gate_state.matches), written under
 * gate_mu: the open gate, asked on every request, takes no lock. */
static atomic_bool gate_is_open = true;
static char *gate_url;
static int64_t gate_timeout_ms;

enum meter_rc schema_read(PGconn *conn, struct schema_state *st)
{
	char why[SCHEMA_WHY_MAX] = "", elsewhere[256] = "";
	enum meter_rc rc;

	*st = (struct schema_state){
	    .have = -1, .want = migrate_latest(), .begun_usec = clock_mono_usec()};
	rc = migrate_verify(conn, &st->have, why, sizeof(why));
	if (rc == METER_ECONFLICT) {
		snprintf(st->why, sizeof(st->why), "%s", why); /* says what to do */
		return METER_OK;
	}
	if (rc == METER_ENOMEM) {
		snprintf(st->why, sizeof(st->why), "%s", why);
		return rc;
	}
	/* Not migrated here, but meter's tables are in another schema: a
	 * migration would start an empty set beside them (and refuses to). */
	if (rc == METER_OK && st->have == 0)
		rc = migrate_elsewhere(conn, elsewhere, sizeof(elsewhere));
	if (rc != METER_OK) {
		snprintf(st->why, sizeof(st->why), "%s",
			 strcmp(db_util_failed_state(), "55P03") == 0
			     ? "the database's schema cannot be read now: another session holds"
			       " schema_migrations locked (a migration under way?)"
			     : "the database's schema cannot be read");
		return METER_EDB;
	}
	st->versions = true;
	if (elsewhere[0])
		snprintf(st->why, sizeof(st->why),
			 "meter's tables are in schema \"%s\", not in \"%s\" (database_schema):"
			 " set it to %s",
			 elsewhere, db_schema(), elsewhere);
	else if (st->have < st->want)
		snprintf(st->why, sizeof(st->why),
			 "the database's schema is at version %d, this meterd needs %d: run "
			 "meterctl migrate",
			 st->have, st->want);
	else if (st->have > st->want)
		snprintf(st->why, sizeof(st->why),
			 "the database's schema is at version %d, newer than this meterd's %d:"
			 " run the newer meterd",
			 st->have, st->want);
	else
		st->matches = true;
	return METER_OK;
}

enum meter_rc schema_read_briefly(PGconn *conn, struct schema_state *st)
{
	PGresult *res = NULL;
	char was[64] = "";
	const char *p[1] = {was};
	enum meter_rc rc, back;

	/* In the session, and put back after: in a transaction, a schema not
	 * made yet (no schema_migrations, an error) would end the reading. */
	rc = db_util_exec(conn, "schema reading", "SHOW lock_timeout", 0, NULL, &res, NULL);
	if (rc == METER_OK && PQntuples(res) == 1)
		snprintf(was, sizeof(was), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (rc == METER_OK && was[0])
		rc = db_util_exec(conn, "schema reading", "SET lock_timeout = " GATE_LOCK_MS, 0,
				  NULL, NULL, NULL);
	if (rc != METER_OK || !was[0]) {
		*st = (struct schema_state){.have = -1, .want = migrate_latest()};
		snprintf(st->why, sizeof(st->why), "the database's schema cannot be read");
		return METER_EDB;
	}
	rc = schema_read(conn, st);
	back = db_util_exec(conn, "schema reading", "SELECT set_config('lock_timeout', $1, false)",
			    1, p, NULL, NULL);
	if (rc != METER_OK || back == METER_OK)
		return rc;
	/* Read, but the session not put back: not a reading to go by. */
	snprintf(st->why, sizeof(st->why), "the database's schema cannot be read");
	return back;
}

void schema_gate_note(const struct schema_state *st)
{
	bool matched_before, was_open, changed;

	pthread_mutex_lock(&gate_mu);
	if (gate_read && st->begun_usec < gate_state.begun_usec) {
		/* Taken before the one the gate holds, and slower to get here. */
		pthread_mutex_unlock(&gate_mu);
		return;
	}
	matched_before = gate_matched;
	was_open = gate_read && gate_state.matches;
	changed = !gate_read || was_open != st->matches ||
		  (!st->matches && strcmp(gate_state.why, st->why) != 0);
	if (!gate_read && gate_started)
		pthread_cond_broadcast(&gate_cv); /* schema_gate_wait */
	gate_state = *st;
	gate_read = true;
	gate_matched |= st->matches;
	atomic_store(&gate_is_open, !gate_started || st->matches);
	pthread_mutex_unlock(&gate_mu);
	if (!changed || !gate_started)
		return;
	if (!st->matches)
		log_warn("schema: %s; until then, requests that need the database are answered 503,"
			 " and the lease-end sweeper, the webhook deliverer and the collector wait",
			 st->why);
	else
		log_info("schema: the database's schema is this meterd's%s (version %d)%s",
			 matched_before ? " again" : "", st->have,
			 matched_before ? ": serving" : "");
}

bool schema_gate_open(char *why, size_t whylen)
{
	bool open;

	if (atomic_load(&gate_is_open))
		return true;
	pthread_mutex_lock(&gate_mu);
	open = !gate_started || (gate_read && gate_state.matches);
	if (!open && why && whylen)
		snprintf(why, whylen, "%s",
			 gate_read ? gate_state.why
				   : "the database has not answered since meterd started,"
				     " so its schema is not known yet");
	pthread_mutex_unlock(&gate_mu);
	return open;
}

bool schema_gate_wait(int64_t ms)
{
	struct timespec until = clock_mono_after_ms(ms);
	bool read;

	pthread_mutex_lock(&gate_mu);
	while (gate_started && !gate_read && !gate_stopping)
		if (pthread_cond_timedwait(&gate_cv, &gate_mu, &until) == ETIMEDOUT)
			break;
	read = gate_read;
	pthread_mutex_unlock(&gate_mu);
	return read;
}

/* Sleeps ms unless stopped; true when stopping. */
static bool gate_nap(int64_t ms)
{
	struct timespec until = clock_mono_after_ms(ms);
	bool stop;

	pthread_mutex_lock(&gate_mu);
	while (!gate_stopping)
		if (pthread_cond_timedwait(&gate_cv, &gate_mu, &until) == ETIMEDOUT)
			break;
	stop = gate_stopping;
	pthread_mutex_unlock(&gate_mu);
	return stop;
}

/* Closes the thread's connection (NULL: none), and its cancel handle
 * first, under the lock schema_gate_stop takes to use it. */
static void gate_close(PGconn *conn)
{
	pthread_mutex_lock(&gate_mu);
	PQfreeCancel(gate_cancel);
	gate_cancel = NULL;
	if (gate_sock >= 0)
		close(gate_sock);
	gate_sock = -1;
	pthread_mutex_unlock(&gate_mu);
	PQfinish(conn);
}

/* A connection for the thread, its statements limited in time and its
 * cancel handle kept; NULL when none can be made now. */
static PGconn *gate_connect(void)
{
	PGconn *conn = NULL;
	PGcancel *cancel;
	char err[256];

	if (db_connect(gate_url, &conn, err, sizeof(err)) != METER_OK ||
	    db_util_session_timeouts(conn, "schema gate session", gate_timeout_ms,
				     db_util_idle_tx_ms(gate_timeout_ms)) != METER_OK ||
	    db_util_exec(conn, "schema gate session", "SET lock_timeout = " GATE_LOCK_MS, 0, NULL,
			 NULL, NULL) != METER_OK ||
	    !(cancel = PQgetCancel(conn))) {
		PQfinish(conn);
		return NULL;
	}
	pthread_mutex_lock(&gate_mu);
	gate_cancel = cancel;
	gate_sock = fcntl(PQsocket(conn), F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&gate_mu);
	return conn;
}

/* Reads the schema every GATE_INTERVAL_MS on a connection of its own,
 * connecting again after it broke. */
static void *gate_main(void *arg)
{
	PGconn *conn = NULL;

	(void)arg;
	do {
		struct schema_state st;
		enum meter_rc rc;

		if (!conn && !(conn = gate_connect()))
			continue;
		pthread_mutex_lock(&gate_mu);
		gate_reading = true;
		pthread_mutex_unlock(&gate_mu);
		rc = schema_read(conn, &st);
		pthread_mutex_lock(&gate_mu);
		gate_reading = false;
		pthread_mutex_unlock(&gate_mu);
		if (rc == METER_OK) {
			schema_gate_note(&st);
			continue;
		}
		if (rc == METER_EDB)
			log_debug("schema gate: %s", st.why);
		else
			log_error("schema gate: %s", st.why);
		if (PQstatus(conn) != CONNECTION_OK) {
			gate_close(conn);
			conn = NULL;
		}
	} while (!gate_nap(GATE_INTERVAL_MS));
	gate_close(conn);
	return NULL;
}

enum meter_rc schema_gate_start(const char *url, int64_t statement_timeout_ms)
{
	pthread_mutex_lock(&gate_mu);
	if (gate_started) {
		pthread_mutex_unlock(&gate_mu);
		return METER_EINVAL;
	}
	gate_url = strdup(url ? url : "");
	if (!gate_url) {
		pthread_mutex_unlock(&gate_mu);
		return METER_ENOMEM;
	}
	gate_timeout_ms = statement_timeout_ms;
	gate_stopping = false;
	gate_read = false;
	if (clock_mono_cond_init(&gate_cv) != 0) {
		free(gate_url);
		gate_url = NULL;
		pthread_mutex_unlock(&gate_mu);
		return METER_EIO;
	}
	gate_started = true;
	atomic_store(&gate_is_open, false);
	pthread_mutex_unlock(&gate_mu);
	if (pthread_create(&gate_thread, NULL, gate_main, NULL) != 0) {
		pthread_mutex_lock(&gate_mu);
		gate_started = false;
		atomic_store(&gate_is_open, true);
		pthread_cond_destroy(&gate_cv);
		free(gate_url);
		gate_url = NULL;
		pthread_mutex_unlock(&gate_mu);
		return METER_EIO;
	}
	return METER_OK;
}

void schema_gate_stop(void)
{
	pthread_mutex_lock(&gate_mu);
	if (!gate_started || gate_stopping) {
		pthread_mutex_unlock(&gate_mu);
		return;
	}
	gate_stopping = true;
	pthread_cond_signal(&gate_cv);
	if (gate_reading) {
		/* A reading under way (at a lock, on a slow server, on one
		 * that stopped answering) is not waited for. */
		db_cancel_now(gate_cancel, gate_sock);
		gate_cancel = NULL;
	}
	pthread_mutex_unlock(&gate_mu);
	pthread_join(gate_thread, NULL);
	pthread_mutex_lock(&gate_mu);
	pthread_cond_destroy(&gate_cv);
	free(gate_url);
	gate_url = NULL;
	pthread_mutex_unlock(&gate_mu);
}
