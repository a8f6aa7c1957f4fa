/* meter: the versioned price book (table price_book). */
#ifndef METER_DB_PRICES_H
#define METER_DB_PRICES_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "money.h"
#include "rc.h"

#define DB_PRICES_LIST_MAX	10000
#define DB_PRICE_FREE_HOURS_MAX 1000000

struct db_price {
	int64_t version;
	int64_t effective_from_usec;
	struct price_rates rates;
	int64_t free_sandbox_hours;
	bool storage_price_assumed;
	int64_t created_at_usec;
	bool current; /* the version in effect now */
};

/* Every version, oldest first (at most DB_PRICES_LIST_MAX); exactly one has
 * current set (the latest whose effective_from is not in the future). *out
 * is a new array (caller frees). */
METER_MUSTCHECK enum meter_rc db_prices_list(PGconn *conn, struct db_price **out, size_t *n);

/* How long adding a version tries to have the checks and metering that
 * read the book end, ms (checks that come meanwhile wait behind it, at
 * most 50 ms at a time: sql/0035): past it the add fails (METER_EDB,
 * SQLSTATE 55P03) and adds nothing. */
#define DB_PRICES_LOCK_MS 2000

/* Adds a version effective from effective_from_usec, which must not be
 * before *earliest_usec, the database's now(), the end of every open lease
 * and every sample metered (sql/0035): METER_EINVAL when it is, and
 * nothing is added (the past, and what open leases held, are never
 * repriced). METER_ECONFLICT when a version already starts at that
 * instant. rates must have passed price_rates_validate. Fills *out. */
METER_MUSTCHECK enum meter_rc db_prices_add(PGconn *conn, int64_t effective_from_usec,
					    const struct price_rates *rates,
					    int64_t free_sandbox_hours, bool storage_price_assumed,
					    struct db_price *out, int64_t *earliest_usec);

#endif
