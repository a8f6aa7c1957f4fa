/* meter: account keys (table api_keys) and their day in key_day_ledger. */
#ifndef METER_DB_KEYS_H
#define METER_DB_KEYS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "parse.h"
#include "rc.h"

#define DB_KEY_TZ_MAX	 64    /* bytes of an IANA time zone name we accept */
#define DB_KEYS_LIST_MAX 10000 /* keys listed at most for one account */

/* A key as the API shows it, with its current day (in its time zone). */
struct db_key {
	char account_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1];
	char role[16]; /* "full" or "read_only" */
	bool has_limit;
	int64_t daily_limit_micros; /* when has_limit */
	char time_zone[DB_KEY_TZ_MAX + 1];
	int64_t created_at_usec;
	int64_t revoked_at_usec;  /* INT64_MIN: not revoked */
	char day[16];		  /* "YYYY-MM-DD": today in time_zone */
	int64_t day_spent_micros; /* 0 when the day has no ledger row */
	int64_t day_held_micros;
};

/* k's day committed (spent + held): each fits a bigint, their sum need
 * not (a key with no limit may hold up to the largest), so it stops at the
 * largest. */
int64_t db_key_committed(const struct db_key *k);

/* What k's daily limit leaves of its day: the limit less committed, at
 * least 0; -1 when k has no limit. */
int64_t db_key_remaining(const struct db_key *k);

/* What authentication needs of a key. */
struct db_key_auth {
	char account_id[PARSE_ID_MAX + 1];
	bool read_only;
	bool revoked;
	unsigned char secret_hash[KEYS_HASH_LEN];
};

/* Looks key_id up for authentication. METER_ENOTFOUND when there is no
 * such key. */
METER_MUSTCHECK enum meter_rc db_key_auth_get(PGconn *conn, const char *key_id,
					      struct db_key_auth *out);

/* Creates a key of account_id with a new random id and the given secret
 * hash; role "full" or "read_only"; no limit unless has_limit; time_zone
 * NULL for UTC. Fills *out. METER_ENOTFOUND: no such account;
 * METER_EINVAL: time_zone is not an IANA name PostgreSQL knows. */
METER_MUSTCHECK enum meter_rc db_key_create(PGconn *conn, const char *account_id,
					    const unsigned char hash[KEYS_HASH_LEN],
					    const char *role, bool has_limit, int64_t limit_micros,
					    const char *time_zone, struct db_key *out);

/* The key key_id, of account_id (NULL: any account). METER_ENOTFOUND when
 * there is none (or it belongs to another account). */
METER_MUSTCHECK enum meter_rc db_key_get(PGconn *conn, const char *account_id, const char *key_id,
					 struct db_key *out);

/* METER_OK when key key_id exists (revoked or not) in account_id (NULL:
 * any account), METER_ENOTFOUND when not. */
METER_MUSTCHECK enum meter_rc db_key_exists(PGconn *conn, const char *account_id,
					    const char *key_id);

/* Revokes the key key_id of account_id: from now on it authenticates
 * nowhere (each meterd forgets a cached lookup within 5 s) and checks
 * naming it are refused 403 key_revoked; its open holds stand until their
 * leases end or settle, and metering still files its sandboxes' spend
 * under it. revoked_at is the database's now (never before the key's
 * creation). Keys are never deleted, and a revoked key stays revoked.
 * Fills *out; *already is true when the key was revoked before (out has
 * that first revocation's time). METER_ENOTFOUND: no such key in that
 * account. */
METER_MUSTCHECK enum meter_rc db_key_revoke(PGconn *conn, const char *account_id,
					    const char *key_id, struct db_key *out, bool *already);

/* The keys of account_id, oldest first (by creation, then key id): at most
 * limit (1 to DB_KEYS_LIST_MAX, else METER_EINVAL), from the first, or from
 * the one after key after (METER_ENOTFOUND when after is no key of the
 * account). *out is a new array of *n keys (caller frees; NULL when
 * none). */
METER_MUSTCHECK enum meter_rc db_key_list(PGconn *conn, const char *account_id, const char *after,
					  int limit, struct db_key **out, size_t *n);

/* Why a key's time zone could not change (METER_ECONFLICT from
 * db_key_set_limits). */
struct db_key_tz_busy {
	int64_t open_holds;	       /* the key's open holds; 0: the zone changed meanwhile */
	int64_t latest_lease_end_usec; /* the latest lease end among them (UTC µs) */
};

/* Sets the key's limits in one transaction: the daily limit when set_limit
 * (none when !has_limit), the time zone when time_zone is not NULL. Today's
 * key_day_ledger row (today in the resulting time zone, made when missing)
 * and any later day's get the new limit, taken before the key row (the
 * ledger's lock order), so a check that read the old limit and then takes
 * the row reads the limit again.
 *
 * A time zone other than the key's (another name) changes only while the
 * key has no open hold: its holds and ledger rows are on the old zone's
 * days, and metering files spend under the zone it reads. Otherwise
 * METER_ECONFLICT with *busy filled, and nothing changes (not the limit
 * either). The holds are counted after the key's ledger rows of the old
 * zone's days from an hour ago to an hour ahead are held (made when
 * missing, in day order with the rows above), then the key row: a check
 * of the old zone holds the row of its first day from before its holds
 * can commit until they do, so a check that took it first has committed
 * and is counted, and one that takes it after waits for this change to
 * commit (the check must then read the key again after its locks, and
 * decide on the new zone's days). Same zone, or none given: as before. A change
 * of the zone committed by another request between the read and the key
 * row starts the transaction again; busy->open_holds is 0 when that kept
 * happening.
 *
 * account_id NULL: any account. Fills *out with the result, or *busy on
 * METER_ECONFLICT. METER_ENOTFOUND: no such key (in that account);
 * METER_EINVAL: bad time zone. */
METER_MUSTCHECK enum meter_rc db_key_set_limits(PGconn *conn, const char *account_id,
						const char *key_id, bool set_limit, bool has_limit,
						int64_t limit_micros, const char *time_zone,
						struct db_key *out, struct db_key_tz_busy *busy);

#endif
