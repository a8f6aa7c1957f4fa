/* meterctl: long-option parsing (see ctl_args.h). */
#include "ctl_args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "migrate.h"
#include "parse.h"

void ctl_fail(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)fprintf(stderr, "meterctl %s: %s\n", cmd, msg);
}

/* The copies ctl_secret_value made: a process's options live as long as
 * it does, so they are kept (and reachable) to its end. */
static char *secret_copies[8];

const char *ctl_secret_value(char *value)
{
	char *copy;
	size_t i = 0;

	while (i < sizeof(secret_copies) / sizeof(secret_copies[0]) && secret_copies[i])
		i++;
	if (i == sizeof(secret_copies) / sizeof(secret_copies[0]))
		return value;
	copy = strdup(value);
	if (!copy)
		return value;
	secret_copies[i] = copy;
	memset(value, 'x', strlen(value));
	return copy;
}

/* Options whose value is a secret: overwritten in argv once read. */
static bool ctl_secret_option(const char *name)
{
	return strcmp(name, "database-url") == 0 || strcmp(name, "token") == 0;
}

int ctl_args_exit(enum ctl_args_result r)
{
	switch (r) {
	case CTL_ARGS_OK:
		return -1;
	case CTL_ARGS_HELP:
		return 0;
	case CTL_ARGS_BAD:
		break;
	}
	return 2;
}

const char *ctl_arg_help_with_value(const char *a)
{
	if (strncmp(a, "--help=", 7) == 0)
		return "--help";
	if (strncmp(a, "-h=", 3) == 0)
		return "-h";
	return NULL;
}

struct ctl_arg *ctl_arg_get(struct ctl_arg *args, size_t nargs, const char *name)
{
	for (size_t i = 0; i < nargs; i++)
		if (strcmp(args[i].name, name) == 0)
			return &args[i];
	return NULL;
}

/* Finds the option named by name[0..len). */
static struct ctl_arg *find(struct ctl_arg *args, size_t nargs, const char *name, size_t len)
{
	for (size_t i = 0; i < nargs; i++)
		if (strlen(args[i].name) == len && strncmp(args[i].name, name, len) == 0)
			return &args[i];
	return NULL;
}

/* Finds the option whose short name a is ("-o" or "-o=..."). */
static struct ctl_arg *find_short(struct ctl_arg *args, size_t nargs, const char *a)
{
	if (a[0] != '-' || a[1] == '\0' || a[1] == '-' || (a[2] != '\0' && a[2] != '='))
		return NULL;
	for (size_t i = 0; i < nargs; i++)
		if (args[i].short_name && args[i].short_name == a[1])
			return &args[i];
	return NULL;
}

/* The option o as written: "-o" when short, else "--output". */
static const char *spelled(const struct ctl_arg *o, bool as_short, char *buf, size_t len)
{
	if (as_short)
		snprintf(buf, len, "-%c", o->short_name);
	else
		snprintf(buf, len, "--%s", o->name);
	return buf;
}

enum ctl_args_result ctl_args_parse(const char *cmd, const char *usage, struct ctl_arg *args,
				    size_t nargs, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *value = NULL, *as;
		struct ctl_arg *o;
		char as_buf[72];
		bool as_short;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage, stdout);
			return CTL_ARGS_HELP;
		}
		if (ctl_arg_help_with_value(a)) {
			ctl_fail(cmd, "%s takes no value", ctl_arg_help_with_value(a));
			return CTL_ARGS_BAD;
		}
		o = find_short(args, nargs, a);
		as_short = o != NULL;
		if (o) {
			eq = a[2] == '=' ? a + 2 : NULL;
		} else if (strncmp(a, "--", 2) != 0) {
			char shown[80];

			ctl_fail(cmd,
				 "unexpected argument %s (try --help; a value with blanks needs "
				 "quotes)",
				 parse_arg_shown(a, shown, sizeof(shown)));
			return CTL_ARGS_BAD;
		} else {
			size_t len;

			a += 2;
			eq = strchr(a, '=');
			len = eq ? (size_t)(eq - a) : strlen(a);
			o = find(args, nargs, a, len);
		}
		if (!o) {
			char shown[224];

			ctl_fail(cmd, "unknown option %s (try --help)",
				 parse_arg_shown(argv[i], shown, sizeof(shown)));
			return CTL_ARGS_BAD;
		}
		as = spelled(o, as_short, as_buf, sizeof(as_buf));
		if (o->seen) {
			char before[72];

			if (o->seen_short == as_short)
				ctl_fail(cmd, "%s given twice", as);
			else
				ctl_fail(cmd, "%s given twice (once as %s)", as,
					 spelled(o, o->seen_short, before, sizeof(before)));
			return CTL_ARGS_BAD;
		}
		o->seen = true;
		o->seen_short = as_short;
		if (o->kind == CTL_ARG_FLAG) {
			if (eq) {
				ctl_fail(cmd, "%s takes no value", as);
				return CTL_ARGS_BAD;
			}
			o->i = 1;
			continue;
		}
		if (eq)
			value = eq + 1;
		else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
			value = argv[++i];
		if (!value || !*value) {
			ctl_fail(cmd, "%s needs a value", as);
			return CTL_ARGS_BAD;
		}
		/* As a value after the flag, so written after '=': none begins
		 * with "--", which reads as a mistyped option. */
		if (strncmp(value, "--", 2) == 0) {
			ctl_fail(cmd, "%s: a value may not begin with --", as);
			return CTL_ARGS_BAD;
		}
		if (o->kind == CTL_ARG_STR) {
			o->s = ctl_secret_option(o->name) ? ctl_secret_value((char *)value) : value;
			continue;
		}
		switch (parse_int64(value, o->min, o->max, &o->i)) {
		case METER_OK:
			break;
		case METER_ERANGE:
			ctl_fail(cmd, "%s must be between %lld and %lld", as, (long long)o->min,
				 (long long)o->max);
			return CTL_ARGS_BAD;
		default:
			ctl_fail(cmd, "%s must be a whole number, got \"%.32s\"", as, value);
			return CTL_ARGS_BAD;
		}
	}
	for (size_t i = 0; i < nargs; i++) {
		if (args[i].required && !args[i].seen) {
			ctl_fail(cmd, "--%s is required (try --help)", args[i].name);
			return CTL_ARGS_BAD;
		}
	}
	return CTL_ARGS_OK;
}

const char *ctl_database_url(const char *cmd, const char *flag_value)
{
	const char *url = flag_value, *schema = getenv("METER_DATABASE_SCHEMA");
	char why[96];

	/* meter's schema, as meterd's database_schema says it: read by the
	 * commands that use the database, and by them alone. */
	if (schema && !db_set_schema(schema)) {
		ctl_fail(cmd, "METER_DATABASE_SCHEMA must be 1 to 63 of a-z, 0-9 and _, not"
			      " starting with a digit or pg_");
		return NULL;
	}
	if (!url || !*url)
		url = getenv("METER_DATABASE_URL");
	if (!url || !*url) {
		ctl_fail(cmd, "no database: set METER_DATABASE_URL or --database-url");
		return NULL;
	}
	/* A URL libpq cannot read is a bad argument (exit 2), as for
	 * migrate, not a database that failed; the URL is not echoed (it may
	 * hold a password). */
	if (!db_url_ok(url, why, sizeof(why))) {
		ctl_fail(cmd, "the database URL: %s", why);
		return NULL;
	}
	return url;
}

PGconn *ctl_db_connect(const char *cmd, const char *url)
{
	char err[512], why[400], elsewhere[256] = "";
	PGconn *conn = NULL;
	int have = -1, want = migrate_latest();
	enum meter_rc rc;

	if (db_connect(url, &conn, err, sizeof(err)) != METER_OK) {
		ctl_fail(cmd, "cannot connect to the database: %s", err);
		return NULL;
	}
	rc = migrate_verify(conn, &have, why, sizeof(why));
	if (rc == METER_OK && have == 0)
		rc = migrate_elsewhere(conn, elsewhere, sizeof(elsewhere));
	if (rc == METER_OK && have == want)
		return conn;
	if (rc == METER_ECONFLICT || rc == METER_ENOMEM)
		ctl_fail(cmd, "%s", why); /* a conflict's says what to do */
	else if (rc != METER_OK)
		ctl_fail(cmd, "cannot read the database's schema version");
	else if (elsewhere[0])
		ctl_fail(
		    cmd,
		    "meter's tables are in schema \"%s\", not in \"%s\" (METER_DATABASE_SCHEMA):"
		    " set it to %s",
		    elsewhere, db_schema(), elsewhere);
	else if (have == 0)
		ctl_fail(cmd, "schema \"%s\" of the database is not migrated: run meterctl migrate",
			 db_schema());
	else if (have < want)
		ctl_fail(cmd,
			 "the database's schema is at version %d and this meterctl needs %d: run "
			 "meterctl migrate",
			 have, want);
	else
		ctl_fail(cmd,
			 "the database's schema is at version %d, past this meterctl's %d: use the "
			 "meterctl that migrated it",
			 have, want);
	PQfinish(conn);
	return NULL;
}
