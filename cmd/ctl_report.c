/* meterctl report usage | statement: the exports of DESIGN.md §7 from the
 * command line, identical to the API's (the same reports/ code).
 *
 * With -o FILE and a terminal on stderr, a progress line shows the rows
 * written and how far through the range the export is; piped, it stays
 * silent but for errors. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_doc.h"
#include "ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "db_accounts.h"
#include "db_keys.h"
#include "db_sandboxes.h"
#include "export.h"
#include "statement.h"

static const char usage_text[] =
    "usage: meterctl report usage --account ID --from TIME --to TIME\n"
    "           [--granularity hour|day] [--format csv|ndjson]\n"
    "           [--key-id KEY] [--sandbox-id SANDBOX] [-o FILE] [--database-url URL]\n"
    "       meterctl report statement --account ID --month YYYY-MM [--format csv|html]\n"
    "           [-o FILE] [--database-url URL]\n"
    "\n"
    "-o FILE (also -o=FILE, --output FILE or --output=FILE) writes the report to\n"
    "FILE instead of standard output.\n"
    "TIME is RFC 3339 on a whole UTC hour (2026-11-01T00:00:00Z); the range is\n"
    "[from, to), at most 400 days. Day rows are the key's calendar days.\n";

/* Opens the output: FILE, or stdout when path is NULL. *st: what was
 * opened (zeroed for stdout, or when it cannot be told), for
 * remove_incomplete. */
static FILE *open_output(const char *cmd, const char *path, struct stat *st)
{
	FILE *f;

	memset(st, 0, sizeof(*st));
	if (!path)
		return stdout;
	f = fopen(path, "w");
	if (!f)
		ctl_fail(cmd, "cannot write %s: %s", path, strerror(errno));
	else if (fstat(fileno(f), st) != 0)
		memset(st, 0, sizeof(*st));
	return f;
}

/* Removes an incomplete output, when path still names the regular file
 * written (st): never what it leads to otherwise (a pipe, a device such
 * as /dev/stdout or /dev/full, a symbolic link, or a file put there since),
 * which is not this command's to remove. */
static void remove_incomplete(const char *cmd, const char *path, const struct stat *st)
{
	struct stat now;

	if (!path || !S_ISREG(st->st_mode) || lstat(path, &now) != 0 || !S_ISREG(now.st_mode) ||
	    now.st_dev != st->st_dev || now.st_ino != st->st_ino)
		return;
	if (unlink(path) != 0)
		ctl_fail(cmd, "could not remove the incomplete %s", path);
}

/* The output file while it is being written, for on_interrupt: a report
 * stopped by a signal (Ctrl-C, SIGTERM, a closed terminal) leaves no part
 * of itself to be taken for the whole. */
static const char *volatile guarded_path;
static dev_t guarded_dev;
static ino_t guarded_ino;

/* Removes the output being written, as remove_incomplete does (with only
 * async-signal-safe calls), then dies of the signal as it would have. */
static void on_interrupt(int sig)
{
	const char *path = guarded_path;
	struct stat now;

	if (path && lstat(path, &now) == 0 && S_ISREG(now.st_mode) && now.st_dev == guarded_dev &&
	    now.st_ino == guarded_ino)
		(void)unlink(path);
	(void)raise(sig); /* SA_RESETHAND: the default action now */
}

static const int guarded_sigs[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction guarded_old[sizeof(guarded_sigs) / sizeof(guarded_sigs[0])];
static bool guarded_set[sizeof(guarded_sigs) / sizeof(guarded_sigs[0])];

/* Guards path (st: as opened) against SIGINT, SIGTERM and SIGHUP (those
 * not ignored: under nohup, SIGHUP stays so) until output_unguard();
 * nothing for standard output or a file not regular. */
static void output_guard(const char *path, const struct stat *st)
{
	struct sigaction sa;

	if (!path || !S_ISREG(st->st_mode))
		return;
	guarded_dev = st->st_dev;
	guarded_ino = st->st_ino;
	guarded_path = path;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_interrupt;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(guarded_sigs) / sizeof(guarded_sigs[0]); i++)
		guarded_set[i] = sigaction(guarded_sigs[i], NULL, &guarded_old[i]) == 0 &&
				 guarded_old[i].sa_handler != SIG_IGN &&
				 sigaction(guarded_sigs[i], &sa, NULL) == 0;
}

/* The output is complete (or removed already): signals act as before. */
static void output_unguard(void)
{
	if (!guarded_path)
		return;
	for (size_t i = 0; i < sizeof(guarded_sigs) / sizeof(guarded_sigs[0]); i++)
		if (guarded_set[i])
			(void)sigaction(guarded_sigs[i], &guarded_old[i], NULL);
	guarded_path = NULL;
}

/* Says that writing the output failed (errno e), and so when its reader
 * went away (meterctl report ... | head): what was written is incomplete. */
static void write_failed(const char *cmd, const char *path, int e)
{
	if (e == EPIPE)
		ctl_fail(cmd,
			 "writing %s failed: its reader closed it, so the output is incomplete",
			 path ? path : "standard output");
	else
		ctl_fail(cmd, "writing %s failed: %s", path ? path : "standard output",
			 strerror(e ? e : EIO));
}

/* Closes the output; 0 when everything was written. write_errno: a write
 * that already failed (0: none), said once, here. */
static int close_output(const char *cmd, FILE *f, const char *path, int write_errno)
{
	int bad = write_errno != 0;

	if (!bad && (fflush(f) != 0 || ferror(f))) {
		write_errno = errno;
		bad = 1;
	}
	if (f != stdout && fclose(f) != 0 && !bad) {
		write_errno = errno;
		bad = 1;
	}
	if (bad)
		write_failed(cmd, path, write_errno);
	return bad;
}

/* Percent of [from, to) covered by the period the export reached. */
static int progress_percent(const char *period, int64_t from, int64_t to)
{
	char full[40];
	int64_t at;

	if (strlen(period) == 10)
		snprintf(full, sizeof(full), "%sT00:00:00Z", period);
	else
		snprintf(full, sizeof(full), "%s", period);
	if (agent_doc_parse_time(full, &at) != METER_OK || to <= from)
		return 0;
	if (at <= from)
		return 0;
	if (at >= to)
		return 100;
	return (int)((at - from) * 100 / (to - from));
}

static int report_usage(int argc, char **argv)
{
	const char *cmd = "report usage";
	struct ctl_arg args[] = {
	    {.name = "account", .kind = CTL_ARG_STR, .required = true},
	    {.name = "from", .kind = CTL_ARG_STR, .required = true},
	    {.name = "to", .kind = CTL_ARG_STR, .required = true},
	    {.name = "granularity", .kind = CTL_ARG_STR, .s = "hour"},
	    {.name = "format", .kind = CTL_ARG_STR, .s = "csv"},
	    {.name = "key-id", .kind = CTL_ARG_STR, .s = ""},
	    {.name = "sandbox-id", .kind = CTL_ARG_STR, .s = ""},
	    {.name = "output", .short_name = 'o', .kind = CTL_ARG_STR},
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	const size_t n = sizeof(args) / sizeof(args[0]);
	struct export_params p;
	struct export_cursor *cur = NULL;
	struct export_totals t;
	PGconn *conn = NULL;
	const char *url, *out_path;
	char err[512], buf[65536];
	struct stat out_st;
	bool progress;
	FILE *out = NULL;
	int status = 1, write_errno = 0;
	size_t len;
	enum meter_rc rc;
	const char *what;

	const int parsed = ctl_args_exit(ctl_args_parse(cmd, usage_text, args, n, argc, argv));

	if (parsed >= 0)
		return parsed;
	memset(&p, 0, sizeof(p));
	if (strlen(args[0].s) > PARSE_ID_MAX || strlen(args[5].s) > PARSE_ID_MAX ||
	    strlen(args[6].s) > PARSE_ID_MAX) {
		ctl_fail(cmd, "ids are at most 64 characters");
		return 2;
	}
	snprintf(p.account_id, sizeof(p.account_id), "%s", args[0].s);
	snprintf(p.key_id, sizeof(p.key_id), "%s", args[5].s);
	snprintf(p.sandbox_id, sizeof(p.sandbox_id), "%s", args[6].s);
	if (agent_doc_parse_time(args[1].s, &p.from_usec) != METER_OK) {
		ctl_fail(cmd, "--from: expected RFC 3339, e.g. 2026-11-01T00:00:00Z");
		return 2;
	}
	if (agent_doc_parse_time(args[2].s, &p.to_usec) != METER_OK) {
		ctl_fail(cmd, "--to: expected RFC 3339, e.g. 2026-12-01T00:00:00Z");
		return 2;
	}
	if (strcmp(args[3].s, "hour") == 0) {
		p.granularity = EXPORT_HOUR;
	} else if (strcmp(args[3].s, "day") == 0) {
		p.granularity = EXPORT_DAY;
	} else {
		ctl_fail(cmd, "--granularity: expected hour or day");
		return 2;
	}
	if (strcmp(args[4].s, "csv") == 0) {
		p.format = EXPORT_CSV;
	} else if (strcmp(args[4].s, "ndjson") == 0) {
		p.format = EXPORT_NDJSON;
	} else {
		ctl_fail(cmd, "--format: expected csv or ndjson");
		return 2;
	}
	if (export_params_check(&p, err, sizeof(err)) != METER_OK) {
		/* The check names the API's fields; say the flags. */
		static const char *const flags[][2] = {{"account_id:", "--account:"},
						       {"key_id:", "--key-id:"},
						       {"sandbox_id:", "--sandbox-id:"}};
		const char *flag = NULL, *rest = err;

		for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
			if (strncmp(err, flags[i][0], strlen(flags[i][0])) == 0) {
				flag = flags[i][1];
				rest = err + strlen(flags[i][0]);
			}
		if (flag)
			ctl_fail(cmd, "%s%s", flag, rest);
		else
			ctl_fail(cmd, "--%s", err);
		return 2;
	}
	url = ctl_database_url(cmd, args[8].s);
	if (!url)
		return 2;
	out_path = args[7].s;
	progress = out_path && isatty(STDERR_FILENO);

	conn = ctl_db_connect(cmd, url);
	if (!conn)
		goto out;
	/* An account, key or sandbox that does not exist is an error, as it
	 * is for the statement and the API's export: never a header alone
	 * that looks like an idle account. */
	rc = db_account_exists(conn, p.account_id);
	what = "account not found";
	if (rc == METER_OK && p.key_id[0]) {
		rc = db_key_exists(conn, p.account_id, p.key_id);
		what = "key not found in the account";
	}
	if (rc == METER_OK && p.sandbox_id[0]) {
		rc = db_sandbox_exists(conn, p.account_id, p.sandbox_id);
		what = "sandbox not found in the account";
	}
	if (rc != METER_OK) {
		ctl_fail(cmd, "%s", rc == METER_ENOTFOUND ? what : meter_rc_str(rc));
		goto out;
	}
	if (export_open(conn, &p, &cur, err, sizeof(err)) != METER_OK) {
		ctl_fail(cmd, "%s", err);
		goto out;
	}
	out = open_output(cmd, out_path, &out_st);
	if (!out)
		goto out;
	output_guard(out_path, &out_st);
	for (;;) {
		if (export_next(cur, buf, sizeof(buf), &len) != METER_OK) {
			ctl_fail(cmd,
				 "the database failed during the export; the output is incomplete");
			goto out;
		}
		if (len == 0)
			break;
		if (fwrite(buf, 1, len, out) != len) {
			write_errno = errno ? errno : EIO;
			goto out;
		}
		if (progress)
			fprintf(stderr, "\r%lld rows, %3d%% of the range",
				(long long)export_rows(cur),
				progress_percent(export_last_period(cur), p.from_usec, p.to_usec));
	}
	export_totals_get(cur, &t);
	if (progress)
		fprintf(stderr, "\r%lld rows, 100%% of the range: total %s%lld micros\n",
			(long long)t.rows, t.overflow ? "over " : "", (long long)t.total_micros);
	status = 0;
out:
	export_close(cur);
	if (out && close_output(cmd, out, out_path, write_errno))
		status = 1;
	if (status != 0 && out)
		remove_incomplete(cmd, out_path, &out_st);
	output_unguard();
	if (conn)
		PQfinish(conn);
	return status;
}

static int report_statement(int argc, char **argv)
{
	const char *cmd = "report statement";
	struct ctl_arg args[] = {
	    {.name = "account", .kind = CTL_ARG_STR, .required = true},
	    {.name = "month", .kind = CTL_ARG_STR, .required = true},
	    {.name = "format", .kind = CTL_ARG_STR, .s = "csv"},
	    {.name = "output", .short_name = 'o', .kind = CTL_ARG_STR},
	    {.name = "database-url", .kind = CTL_ARG_STR},
	};
	struct statement s;
	PGconn *conn = NULL;
	const char *url;
	char err[512];
	int year, month, status = 1;
	bool html;
	FILE *out = NULL;
	struct stat out_st;
	enum meter_rc rc;

	const int parsed = ctl_args_exit(
	    ctl_args_parse(cmd, usage_text, args, sizeof(args) / sizeof(args[0]), argc, argv));

	if (parsed >= 0)
		return parsed;
	if (!parse_is_id(args[0].s)) {
		ctl_fail(cmd, "--account: 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return 2;
	}
	if (statement_parse_month(args[1].s, &year, &month) != METER_OK) {
		ctl_fail(cmd, "--month: expected YYYY-MM from 2000-01 to 9999-12, e.g. 2026-11");
		return 2;
	}
	if (strcmp(args[2].s, "csv") != 0 && strcmp(args[2].s, "html") != 0) {
		ctl_fail(cmd, "--format: expected csv or html");
		return 2;
	}
	html = strcmp(args[2].s, "html") == 0;
	url = ctl_database_url(cmd, args[4].s);
	if (!url)
		return 2;
	conn = ctl_db_connect(cmd, url);
	if (!conn)
		goto out;
	rc = statement_build(conn, args[0].s, year, month, &s, err, sizeof(err));
	if (rc != METER_OK) {
		ctl_fail(cmd, "%s", err);
		goto out;
	}
	out = open_output(cmd, args[3].s, &out_st);
	if (out) {
		output_guard(args[3].s, &out_st);
		rc = html ? statement_write_html(&s, out) : statement_write_csv(&s, out);
		status = rc == METER_OK ? 0 : 1;
	}
	statement_release(&s);
out:
	if (out && close_output(cmd, out, args[3].s, 0))
		status = 1;
	if (status != 0 && out)
		remove_incomplete(cmd, args[3].s, &out_st);
	output_unguard();
	if (conn)
		PQfinish(conn);
	return status;
}

int ctl_report_main(int argc, char **argv)
{
	int status;

	if (argc < 2) {
		ctl_fail("report", "expected usage or statement (try --help)");
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (ctl_arg_help_with_value(argv[1])) {
		ctl_fail("report", "%s takes no value", ctl_arg_help_with_value(argv[1]));
		return 2;
	}
	if (strcmp(argv[1], "usage") == 0) {
		status = report_usage(argc - 1, argv + 1);
	} else if (strcmp(argv[1], "statement") == 0) {
		status = report_statement(argc - 1, argv + 1);
	} else {
		ctl_fail("report", "unknown report \"%.32s\": expected usage or statement",
			 argv[1]);
		status = 2;
	}
	return status;
}
