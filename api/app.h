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

#endif
