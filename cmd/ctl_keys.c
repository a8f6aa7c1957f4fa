/* meterctl account create, meterctl key create|revoke: accounts and keys
 * straight in the database, for bootstrapping and for an operator at a
 * shell (the operator token is not needed). Each prints one JSON object on
 * stdout; a key's secret (the whole bearer token, "<key_id>.<secret>") is
 * printed once, when the key is made, and never again. */
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "db_accounts.h"
#include "db_keys.h"
#include "db_util.h"
#include "keys.h"
#include "parse.h"

#define CTL_LIMIT_MAX INT64_C(1000000000000000) /* as the API: 10^15 µ$ */

static const char account_usage[] =
    "usage: meterctl account create --name NAME [--database-url URL]\n"
    "Creates an account and prints {\"account_id\", \"name\", \"created_at\"} as JSON.\n"
    "  --name NAME         1 to 200 characters of UTF-8, no control characters\n"
    "  --database-url URL  libpq URL (default: $METER_DATABASE_URL)\n";

static const char key_usage[] =
    "usage: meterctl key create --account ID --role full|read_only\n"
    "                           [--daily-limit-micros N] [--time-zone TZ]\n"
    "                           [--database-url URL]\n"
    "Creates an API key and prints it as JSON with its secret, shown only this once:\n"
    "{\"key_id\", \"secret\", \"role\", \"daily_limit_micros\", \"time_zone\", ...}.\n"
    "The secret is the whole bearer token: Authorization: Bearer <secret>.\n"
    "  --account ID              the account (meterctl account create)\n"
    "  --role full|read_only     read_only keys can change nothing\n"
    "  --daily-limit-micros N    daily spending limit in microdollars (default: none)\n"
    "  --time-zone TZ            IANA name of the key's day, e.g. Europe/Paris (default UTC)\n"
    "  --database-url URL        libpq URL (default: $METER_DATABASE_URL)\n"
    "\n"
    "usage: meterctl key revoke --account ID --key KEY_ID [--database-url URL]\n"
    "Revokes a key for good and prints {\"key_id\", \"account_id\", \"role\", \"revoked_at\",\n"
    "\"already_revoked\"}. It then authenticates nowhere (every meterd within 5 s) and\n"
    "checks naming it are refused 403 key_revoked; the holds it has stand until their\n"
    "leases end or settle, and its sandboxes' spend is still metered under it.\n"
    "Revoking a revoked key changes nothing: already_revoked is true, revoked_at the first time.\n"
    "  --account ID              the key's account (a guard: another's key is not found)\n"
    "  --key KEY_ID              the key (key_<16 hex>)\n"
    "  --database-url URL        libpq URL (default: $METER_DATABASE_URL)\n";

/* Prints o compactly with a newline and frees it; 0, or 1 when stdout
 * failed (then says so, and what was done all the same when done is not
 * NULL). */
static int ctl_print_json(const char *cmd, json_t *o, const char *done)
{
	char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	int status = 0;

	json_decref(o);
	if (!text || printf("%s\n", text) < 0 || fflush(stdout) == EOF) {
		if (done)
			ctl_fail(cmd, "%s, but cannot write the result", done);
		else
			ctl_fail(cmd, "cannot write the result");
		status = 1;
	}
	if (text) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	}
	return status;
}

/* Runs BEGIN or COMMIT on conn; false after a message. */
static bool ctl_tx(const char *cmd, PGconn *conn, const char *sql)
{
	if (db_util_exec(conn, sql, sql, 0, NULL, NULL, NULL) == METER_OK)
		return true;
	ctl_fail(cmd, "%s failed: %s", sql, PQerrorMessage(conn));
	return false;
}

/* Prints o (ctl_print_json), then commits what the transaction made: a
 * result that could not be written is not made (the key's secret would be
 * lost with it), and one written but not committed is said to be void. */
static int ctl_print_commit(const char *cmd, PGconn *conn, json_t *o)
{
	int status = ctl_print_json(cmd, o, NULL);

	if (status != 0) {
		ctl_fail(cmd, "nothing was created");
		return status; /* closing the connection rolls back */
	}
	if (!ctl_tx(cmd, conn, "COMMIT")) {
		ctl_fail(cmd, "nothing was created: disregard the result printed");
		return 1;
	}
	return 0;
}

static int ctl_account_create(int argc, char **argv)
{
	static const char cmd[] = "account create";
	struct ctl_arg args[] = {
	    {.name = "name", .kind = CTL_ARG_STR, .required = true},
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	struct db_account acc;
	const char *url;
	PGconn *conn = NULL;
	char when[40];
	size_t chars = 0;
	int status = 1;
	enum meter_rc rc;

	const int parsed = ctl_args_exit(ctl_args_parse(cmd, account_usage, args, 2, argc, argv));

	if (parsed >= 0)
		return parsed;
	/* As the API takes it: characters counted as the table counts them. */
	switch (parse_plain_text(args[0].s, strlen(args[0].s), &chars)) {
	case METER_OK:
		break;
	case METER_ERANGE:
		ctl_fail(cmd, "--name holds a control character");
		return 2;
	default:
		ctl_fail(cmd, "--name is not UTF-8");
		return 2;
	}
	if (chars == 0 || chars > DB_ACCOUNT_NAME_MAX) {
		ctl_fail(cmd, "--name must be 1 to %d characters", DB_ACCOUNT_NAME_MAX);
		return 2;
	}
	url = ctl_database_url(cmd, args[1].s);
	if (!url)
		return 2;
	conn = ctl_db_connect(cmd, url);
	if (!conn || !ctl_tx(cmd, conn, "BEGIN"))
		goto out;
	rc = db_account_create(conn, args[0].s, &acc);
	if (rc == METER_EINVAL) {
		ctl_fail(cmd, "the database refused the name");
		status = 2;
		goto out;
	}
	if (rc != METER_OK) {
		ctl_fail(cmd, "cannot create the account: %s", meter_rc_str(rc));
		goto out;
	}
	agent_doc_format_time(acc.created_at_usec, when, sizeof(when));
	status = ctl_print_commit(cmd, conn,
				  json_pack("{s:s, s:s, s:s}", "account_id", acc.account_id, "name",
					    acc.name, "created_at", when));
out:
	PQfinish(conn);
	return status;
}

static int ctl_key_create(int argc, char **argv)
{
	static const char cmd[] = "key create";
	struct ctl_arg args[] = {
	    {.name = "account", .kind = CTL_ARG_STR, .required = true},
	    {.name = "role", .kind = CTL_ARG_STR, .required = true},
	    {.name = "daily-limit-micros", .kind = CTL_ARG_INT, .min = 0, .max = CTL_LIMIT_MAX},
	    {.name = "time-zone", .kind = CTL_ARG_STR},
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	char secret[KEYS_SECRET_LEN + 1] = "", token[KEYS_TOKEN_MAX + 1] = "", when[40];
	unsigned char hash[KEYS_HASH_LEN];
	struct db_key key;
	const char *url;
	PGconn *conn = NULL;
	json_t *o;
	int status = 1;
	enum meter_rc rc;

	const int parsed = ctl_args_exit(ctl_args_parse(cmd, key_usage, args, 5, argc, argv));

	if (parsed >= 0)
		return parsed;
	if (!parse_is_id(args[0].s)) {
		ctl_fail(cmd, "--account must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return 2;
	}
	if (strcmp(args[0].s, DB_ACCOUNT_UNATTRIBUTED) == 0) {
		ctl_fail(cmd, "the unattributed account holds the usage of sandboxes no key claims:"
			      " it takes no keys");
		return 2;
	}
	if (strcmp(args[1].s, "full") != 0 && strcmp(args[1].s, "read_only") != 0) {
		ctl_fail(cmd, "--role must be full or read_only");
		return 2;
	}
	if (args[3].s && !keys_tz_shape_ok(args[3].s)) {
		ctl_fail(cmd, "--time-zone must be an IANA name such as Europe/Paris");
		return 2;
	}
	url = ctl_database_url(cmd, args[4].s);
	if (!url)
		return 2;
	if (keys_new_secret(secret, sizeof(secret)) != METER_OK ||
	    keys_hash_secret(secret, strlen(secret), hash) != METER_OK) {
		ctl_fail(cmd, "cannot draw a random secret");
		goto out;
	}
	conn = ctl_db_connect(cmd, url);
	if (!conn || !ctl_tx(cmd, conn, "BEGIN"))
		goto out;
	rc = db_key_create(conn, args[0].s, hash, args[1].s, args[2].seen, args[2].i, args[3].s,
			   &key);
	if (rc == METER_ENOTFOUND) {
		ctl_fail(cmd, "no account %s", args[0].s);
		goto out;
	}
	if (rc == METER_EINVAL) {
		ctl_fail(cmd,
			 "--time-zone %s is not a time zone the database knows, or is an"
			 " abbreviation (CET, EST: read as fixed offsets): name a place's zone,"
			 " such as Europe/Paris",
			 args[3].s);
		status = 2;
		goto out;
	}
	if (rc != METER_OK ||
	    keys_token_format(key.key_id, secret, token, sizeof(token)) != METER_OK) {
		ctl_fail(cmd, "cannot create the key: %s", meter_rc_str(rc));
		goto out;
	}
	agent_doc_format_time(key.created_at_usec, when, sizeof(when));
	o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s}", "key_id", key.key_id, "secret", token,
		      "account_id", key.account_id, "role", key.role, "daily_limit_micros",
		      key.has_limit ? json_integer(key.daily_limit_micros) : json_null(),
		      "time_zone", key.time_zone, "created_at", when);
	status = ctl_print_commit(cmd, conn, o);
out:
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(token, sizeof(token));
	PQfinish(conn);
	return status;
}

static int ctl_key_revoke(int argc, char **argv)
{
	static const char cmd[] = "key revoke";
	struct ctl_arg args[] = {
	    {.name = "account", .kind = CTL_ARG_STR, .required = true},
	    {.name = "key", .kind = CTL_ARG_STR, .required = true},
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	struct db_key key;
	const char *url;
	PGconn *conn = NULL;
	char when[40];
	bool already;
	int status = 1;
	enum meter_rc rc;

	const int parsed = ctl_args_exit(ctl_args_parse(cmd, key_usage, args, 3, argc, argv));

	if (parsed >= 0)
		return parsed;
	if (!parse_is_id(args[0].s) || !parse_is_id(args[1].s)) {
		ctl_fail(cmd,
			 "--account and --key must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return 2;
	}
	url = ctl_database_url(cmd, args[2].s);
	if (!url)
		return 2;
	conn = ctl_db_connect(cmd, url);
	if (!conn)
		goto out;
	rc = db_key_revoke(conn, args[0].s, args[1].s, &key, &already);
	if (rc == METER_ENOTFOUND) {
		ctl_fail(cmd, "no key %s in account %s", args[1].s, args[0].s);
		goto out;
	}
	if (rc != METER_OK) {
		ctl_fail(cmd, "cannot revoke the key: %s", meter_rc_str(rc));
		goto out;
	}
	agent_doc_format_time(key.revoked_at_usec, when, sizeof(when));
	/* The revocation is committed: a result that cannot be written says so
	 * (a second run answers already_revoked). */
	status = ctl_print_json(cmd,
				json_pack("{s:s, s:s, s:s, s:s, s:b}", "key_id", key.key_id,
					  "account_id", key.account_id, "role", key.role,
					  "revoked_at", when, "already_revoked", already),
				"the key is revoked");
out:
	PQfinish(conn);
	return status;
}

/* A noun's verb and what runs it (on argc - 1, argv + 1). */
struct ctl_verb {
	const char *name;
	int (*run)(int, char **);
};

/* Dispatches "<noun> <verb> ..." to the verb's function; verbs ends with
 * an entry of no name. */
static int ctl_noun(const char *noun, const char *usage, const struct ctl_verb *verbs, int argc,
		    char **argv)
{
	char names[64] = "";

	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc >= 2 && ctl_arg_help_with_value(argv[1])) {
		ctl_fail(noun, "%s takes no value", ctl_arg_help_with_value(argv[1]));
		return 2;
	}
	for (const struct ctl_verb *v = verbs; v->name; v++) {
		if (argc >= 2 && strcmp(argv[1], v->name) == 0)
			return v->run(argc - 1, argv + 1);
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s\"%s\"",
			 v == verbs	 ? ""
			 : (v + 1)->name ? ", "
					 : " or ",
			 v->name);
	}
	fprintf(stderr, "meterctl %s: expected %s (see meterctl %s --help)\n", noun, names, noun);
	return 2;
}

int ctl_account_main(int argc, char **argv)
{
	static const struct ctl_verb verbs[] = {{"create", ctl_account_create}, {NULL, NULL}};

	return ctl_noun("account", account_usage, verbs, argc, argv);
}

int ctl_key_main(int argc, char **argv)
{
	static const struct ctl_verb verbs[] = {
	    {"create", ctl_key_create}, {"revoke", ctl_key_revoke}, {NULL, NULL}};

	return ctl_noun("key", key_usage, verbs, argc, argv);
}
