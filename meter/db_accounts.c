/* meter: accounts (see db_accounts.h). */
#include "db_accounts.h"

#include <stdio.h>
#include <string.h>

#include "db_util.h"
#include "keys.h"

#define DB_ACCOUNT_ID_TRIES 4

static const char sql_account_insert[] = "INSERT INTO accounts (account_id, name) VALUES ($1, $2)"
					 " ON CONFLICT (account_id) DO NOTHING"
					 " RETURNING account_id, name, " DB_USEC("created_at");

enum meter_rc db_account_create(PGconn *conn, const char *name, struct db_account *out)
{
	char id[KEYS_GEN_ID_LEN + 1], state[6];
	PGresult *res = NULL;
	enum meter_rc rc = METER_EDB;

	for (int i = 0; i < DB_ACCOUNT_ID_TRIES; i++) {
		const char *params[] = {id, name};

		rc = keys_new_account_id(id, sizeof(id));
		if (rc != METER_OK)
			return rc;
		rc = db_util_exec(conn, "account create", sql_account_insert, 2, params, &res,
				  state);
		if (rc != METER_OK)
			return strncmp(state, "23", 2) == 0 || strncmp(state, "22", 2) == 0
				   ? METER_EINVAL
				   : rc;
		if (PQntuples(res) == 1)
			break;
		PQclear(res); /* the id was taken: draw another */
		res = NULL;
	}
	if (!res)
		return METER_ECONFLICT;
	db_util_str(res, 0, 0, out->account_id, sizeof(out->account_id));
	db_util_str(res, 0, 1, out->name, sizeof(out->name));
	rc = db_util_i64(res, 0, 2, &out->created_at_usec, NULL);
	PQclear(res);
	return rc;
}

enum meter_rc db_account_exists(PGconn *conn, const char *account_id)
{
	const char *params[] = {account_id};

	return db_util_exists(conn, "account exists",
			      "SELECT 1 FROM accounts WHERE account_id = $1", 1, params);
}
