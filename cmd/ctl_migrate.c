/* meterctl migrate: applies the compiled schema migrations. */
#include <stdio.h>

#include "ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "migrate.h"

static const char ctl_migrate_usage[] =
    "usage: meterctl migrate [--database-url URL]\n"
    "Applies every schema migration the database does not have yet.\n"
    "  --database-url URL  libpq URL or key=value string (default: $METER_DATABASE_URL)\n";

/* Parses argv (argv[0] is "migrate") and runs the migrations. The URL is
 * never printed: it may hold the password. Returns the exit status (see
 * ctl.h). */
int ctl_migrate_main(int argc, char **argv)
{
	static const char cmd[] = "migrate";
	struct ctl_arg args[] = {
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	const int parsed = ctl_args_exit(ctl_args_parse(
	    cmd, ctl_migrate_usage, args, sizeof(args) / sizeof(args[0]), argc, argv));
	const char *url;
	char err[512] = "";
	PGconn *conn = NULL;
	enum meter_rc rc;
	int applied = 0;
	int status = 1;

	if (parsed >= 0)
		return parsed;
	/* As the other commands: no URL, or one that no connection can
	 * succeed with, is a bad argument (2), not a database that failed
	 * (1). */
	url = ctl_database_url(cmd, args[0].s);
	if (!url)
		return 2;

	rc = db_connect(url, &conn, err, sizeof(err));
	if (rc == METER_EINVAL) {
		fprintf(stderr, "meterctl migrate: %s\n", err);
		status = 2;
		goto out;
	}
	if (rc != METER_OK) {
		fprintf(stderr, "meterctl migrate: cannot connect to the database: %s\n", err);
		goto out;
	}
	rc = migrate_apply(conn, &applied, err, sizeof(err));
	if (rc == METER_ECONFLICT && applied == 0) {
		/* Refused before anything was applied: err says what to do. */
		fprintf(stderr, "meterctl migrate: %s\n", err);
		goto out;
	}
	if (rc != METER_OK) {
		fprintf(stderr, "meterctl migrate: %s (%d applied before the failure)\n", err,
			applied);
		goto out;
	}
	/* Success means every compiled migration is recorded, and nothing newer. */
	printf("migrated: %d applied, schema version %d\n", applied,
	       migrations_count > 0 ? migrations_src[migrations_count - 1].version : 0);
	status = 0;
out:
	PQfinish(conn);
	return status;
}
