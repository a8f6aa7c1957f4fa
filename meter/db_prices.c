/* meter: the price book (see db_prices.h). */
#include "db_prices.h"

#include <stdlib.h>
#include <string.h>

#include "db_util.h"

/* clang-format off */
#define PRICE_COLUMNS \
	"p.version, " DB_USEC("p.effective_from") ", p.cpu_micros_per_vcpu_hour," \
	" p.memory_micros_per_gib_hour, p.storage_micros_per_gib_hour, p.floor_millicores," \
	" p.free_sandbox_hours, p.storage_price_assumed, " DB_USEC("p.created_at")
/* clang-format on */

/* Reads row of res (PRICE_COLUMNS from column col on) into *out. */
static enum meter_rc price_row(const PGresult *res, int row, int col, struct db_price *out)
{
	int64_t *fields[] = {&out->version,
			     &out->effective_from_usec,
			     &out->rates.cpu_micros_per_vcpu_hour,
			     &out->rates.memory_micros_per_gib_hour,
			     &out->rates.storage_micros_per_gib_hour,
			     &out->rates.floor_millicores,
			     &out->free_sandbox_hours};
	enum meter_rc rc = METER_OK;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < 7 && rc == METER_OK; i++)
		rc = db_util_i64(res, row, col + i, fields[i], NULL);
	out->storage_price_assumed = db_util_bool(res, row, col + 7);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, col + 8, &out->created_at_usec, NULL);
	return rc;
}

enum meter_rc db_prices_list(PGconn *conn, struct db_price **out, size_t *n)
{
	PGresult *res = NULL;
	struct db_price *v = NULL;
	enum meter_rc rc;
	int rows;

	*out = NULL;
	*n = 0;
	rc =
	    db_util_exec(conn, "prices list",
			 "SELECT " PRICE_COLUMNS ", p.version = (SELECT q.version FROM price_book q"
			 " WHERE q.effective_from <= now() ORDER BY q.effective_from DESC"
			 " LIMIT 1) FROM price_book p ORDER BY p.effective_from LIMIT 10000",
			 0, NULL, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rows = PQntuples(res);
	if (rows > 0) {
		v = calloc((size_t)rows, sizeof(*v));
		if (!v) {
			rc = METER_ENOMEM;
			goto out;
		}
	}
	for (int i = 0; i < rows && rc == METER_OK; i++) {
		rc = price_row(res, i, 0, &v[i]);
		v[i].current = db_util_bool(res, i, 9);
	}
	if (rc != METER_OK) {
		free(v);
		goto out;
	}
	*out = v;
	*n = (size_t)rows;
out:
	PQclear(res);
	return rc;
}

enum meter_rc db_prices_add(PGconn *conn, int64_t effective_from_usec,
			    const struct price_rates *rates, int64_t free_sandbox_hours,
			    bool storage_price_assumed, struct db_price *out,
			    int64_t *earliest_usec)
{
	char from[40], cpu[24], mem[24], sto[24], flo[24], free_h[24], state[6];
	const char *params[] = {from,
				cpu,
				mem,
				sto,
				flo,
				free_h,
				storage_price_assumed ? "t" : "f",
				DB_STR(DB_PRICES_LOCK_MS)};
	PGresult *res = NULL;
	enum meter_rc rc;

	db_util_time_param(effective_from_usec, from, sizeof(from));
	db_util_i64_param(rates->cpu_micros_per_vcpu_hour, cpu, sizeof(cpu));
	db_util_i64_param(rates->memory_micros_per_gib_hour, mem, sizeof(mem));
	db_util_i64_param(rates->storage_micros_per_gib_hour, sto, sizeof(sto));
	db_util_i64_param(rates->floor_millicores, flo, sizeof(flo));
	db_util_i64_param(free_sandbox_hours, free_h, sizeof(free_h));
	*earliest_usec = 0;
	rc = db_util_exec(
	    conn, "prices add",
	    "SELECT " DB_USEC(
		"p.earliest") ", " PRICE_COLUMNS ", p.in_force"
			      " FROM meter_price_add($1::timestamptz, $2, $3, $4, $5, $6::integer,"
			      " $7::boolean, $8::integer) p",
	    8, params, &res, state);
	if (rc != METER_OK)
		return strcmp(state, "23505") == 0 ? METER_ECONFLICT : rc;
	if (PQntuples(res) != 1 || db_util_i64(res, 0, 0, earliest_usec, NULL) != METER_OK)
		rc = METER_EDB;
	else if (PQgetisnull(res, 0, 1))
		rc = METER_EINVAL; /* before *earliest_usec */
	else
		rc = price_row(res, 0, 1, out);
	if (rc == METER_OK)
		out->current = db_util_bool(res, 0, 10);
	PQclear(res);
	return rc;
}
