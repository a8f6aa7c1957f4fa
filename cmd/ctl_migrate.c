/* meterctl migrate: applies the compiled schema migrations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "migrate.h"
#include "parse.h"

static const char ctl_migrate_usage[] =
    "usage: meterctl migrate [--database-url URL]\n"
    "Applies every schema migration the database does not have yet.\n"
    "  --database-url URL  libpq URL or key=value string (default: $METER_DATABASE_URL)\n";

/* Parses argv (argv[0] is "migrate") and runs the migrations. The URL is
 * never printed: it may hold the password. Returns the exit status (see
 * ctl.h). */
int ctl_migrate_main(int argc, char **argv)
{
	const char *url = NULL;
	char err[512] = "";
	PGconn *conn = NULL;
	enum meter_rc rc;
	int applied = 0;
	int status = 1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(ctl_migrate_usage, stdout);
			return 0;
		} else if (strcmp(a, "--database-url") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "meterctl migrate: --database-url needs a value\n");
				return 2;
			}
			url = ctl_secret_value(argv[++i]);
		} else if (strncmp(a, "--database-url=", 15) == 0) {
			url = ctl_secret_value(argv[i] + 15);
		} else {
			char shown[80];

			fprintf(stderr,
				"meterctl migrate: unknown argument %s (see meterctl migrate "
				"--help)\n",
				parse_arg_shown(a, shown, sizeof(shown)));
			return 2;
		}
	}
	if (url && !*url) {
		fprintf(stderr, "meterctl migrate: --database-url is empty\n");
		return 2;
	}
	if (!url)
		url = getenv("METER_DATABASE_URL");
	if (!url || !*url) {
		fprintf(stderr, "meterctl migrate: no database URL (give --database-url or set "
				"METER_DATABASE_URL)\n");
		return 2;
	}
	/* As the other commands: a URL that no connection can succeed with
	 * is a bad argument (2), not a database that failed (1). */
	if (!db_url_ok(url, err, sizeof(err))) {
		fprintf(stderr, "meterctl migrate: the database URL: %s\n", err);
		return 2;
	}

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
