/* meter API: the state the daemon's handlers share. */
#ifndef METER_APP_H
#define METER_APP_H

#include "config.h"
#include "dbpool.h"

struct checks_engine;

struct app {
	const struct meter_config *cfg; /* borrowed, lives as long as the daemon */
	struct db_pool *pool;		/* borrowed */
	struct checks_engine *checks;	/* borrowed; NULL: checks answer 503 */
};

/* Asks the database "SELECT 1" on a pooled connection within timeout_ms
 * (db_pool_ping). The pool and the check engine back off each on its own
 * while the database is down; whichever reaches it first ends the other's
 * wait: the pool tries at once if the engine has connected since the
 * pool's last failure, and once the pool is answered the engine's next
 * check connects at once. GET /readyz and the daemon's watch (every
 * second) call it, so /readyz, checks and the other routes come back
 * within about a second of one another. */
METER_MUSTCHECK enum meter_rc app_db_ping(const struct app *app, int timeout_ms);

#endif
