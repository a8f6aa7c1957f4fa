/* meterctl: long-option parsing shared by the sub-commands.
 *
 * Options are "--name value" or "--name=value" (one with a short name,
 * "-o value" or "-o=value" too); a value that starts with "--" counts as
 * missing. Anything wrong is reported as one line on stderr, "meterctl
 * <cmd>: <what>", naming the option as it was written, and the command
 * exits with status 2. */
#ifndef METER_CTL_ARGS_H
#define METER_CTL_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

enum ctl_arg_kind {
	CTL_ARG_FLAG, /* no value */
	CTL_ARG_INT,  /* a whole decimal number in [min, max] */
	CTL_ARG_STR,  /* any non-empty text */
};

struct ctl_arg {
	const char *name; /* without "--" */
	char short_name;  /* 'o' for -o, the same option; 0 = none */
	enum ctl_arg_kind kind;
	bool required;
	int64_t min, max; /* CTL_ARG_INT */
	/* Results. */
	bool seen;
	bool seen_short; /* as written when seen: -o rather than --output */
	int64_t i;	 /* CTL_ARG_INT value (the default until seen) */
	const char *s;	 /* CTL_ARG_STR value, borrowed from argv (default until seen) */
};

enum ctl_args_result {
	CTL_ARGS_OK,
	CTL_ARGS_HELP, /* usage was printed on stdout: exit 0 */
	CTL_ARGS_BAD,  /* one line on stderr: exit 2 */
};

/* Parses argv[1..argc) (argv[0] is the sub-command) against args. "--help"
 * prints usage (a static text) and returns CTL_ARGS_HELP. */
enum ctl_args_result ctl_args_parse(const char *cmd, const char *usage, struct ctl_arg *args,
				    size_t nargs, int argc, char **argv);

/* What a sub-command's main does with a parse result: -1 to go on, else
 * the exit status to return (0 after --help, 2 after a bad argument). */
int ctl_args_exit(enum ctl_args_result r);

/* When a is --help or -h with a value ("--help=yes"), which neither takes,
 * the flag as written ("--help" or "-h", static) for the caller to say so;
 * else NULL. */
const char *ctl_arg_help_with_value(const char *a);

/* The option called name (it must be in args). */
struct ctl_arg *ctl_arg_get(struct ctl_arg *args, size_t nargs, const char *name);

/* Prints "meterctl <cmd>: <message>" on stderr. */
__attribute__((format(printf, 2, 3))) void ctl_fail(const char *cmd, const char *fmt, ...);

/* A secret's value taken from the command line (a database URL, which may
 * hold a password; a token): a copy kept for the process's life, and the
 * text in argv overwritten with 'x' (a command line is readable by every
 * local user for as long as the process runs). value points into argv.
 * The value itself when no copy can be made (then left as it is). */
const char *ctl_secret_value(char *value);

/* The database URL: --database-url when given (s non-NULL), else
 * METER_DATABASE_URL; NULL (after a line on stderr) when neither is set,
 * or when METER_DATABASE_SCHEMA (set as db_schema() here) is no schema
 * name. Every command that uses the database calls it first. */
const char *ctl_database_url(const char *cmd, const char *flag_value);

/* A connection to url whose schema (METER_DATABASE_SCHEMA) is the one this
 * binary's migrations make; NULL after one line on stderr saying why not:
 * the database cannot be reached, is not migrated (or its tables are in
 * another schema), is behind (run meterctl migrate) or ahead of this
 * binary, or was migrated by another build. */
PGconn *ctl_db_connect(const char *cmd, const char *url);

#endif
