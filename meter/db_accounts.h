/* meter: accounts (table accounts). */
#ifndef METER_DB_ACCOUNTS_H
#define METER_DB_ACCOUNTS_H

#include <libpq-fe.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"

#define DB_ACCOUNT_NAME_MAX 200 /* characters, as the table's CHECK counts them */

struct db_account {
	char account_id[PARSE_ID_MAX + 1];
	char name[DB_ACCOUNT_NAME_MAX * 4 + 1]; /* UTF-8 */
	int64_t created_at_usec;
};

/* Creates an account named name (1..DB_ACCOUNT_NAME_MAX characters) under a new
 * random id "acc_<16 hex>" (retried on the unlikely collision) and fills
 * *out. METER_EINVAL when the table refuses the name, METER_EDB otherwise. */
METER_MUSTCHECK enum meter_rc db_account_create(PGconn *conn, const char *name,
						struct db_account *out);

/* The account that holds the usage of sandboxes no key claims (seeded by
 * the schema): an operator's view, which takes no keys (a key of it would
 * read, and bill, every such sandbox). */
#define DB_ACCOUNT_UNATTRIBUTED "unattributed"

/* METER_OK when account_id exists, METER_ENOTFOUND when not. */
METER_MUSTCHECK enum meter_rc db_account_exists(PGconn *conn, const char *account_id);

#endif
