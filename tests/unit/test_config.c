/* Unit tests of configuration: defaults, file, environment, flags, precedence. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "db.h"
#include "url.h"

static char tmpfile_path[64];

static void write_file(const char *text)
{
	FILE *f;
	int fd;

	snprintf(tmpfile_path, sizeof(tmpfile_path), "/tmp/meter-config-XXXXXX");
	fd = mkstemp(tmpfile_path);
	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
}

static void test_defaults(void)
{
	struct meter_config c;

	config_init(&c);
	CHECK_STR(c.listen, "127.0.0.1:8080");
	CHECK_STR(c.database_url, "");
	CHECK_I64(c.http_threads, 2);
	CHECK_I64(c.webhook_concurrency, 4);
}

static void test_precedence(void)
{
	struct meter_config c;
	char err[256];
	bool help;
	char *argv[] = {"meterd", "--config", tmpfile_path, "--listen", "127.0.0.1:9003", NULL};
	char *argv_none[] = {"meterd", "--config", tmpfile_path, NULL};
	char *env[] = {"METER_LISTEN=127.0.0.1:9002", "METER_DB_POOL_SIZE=5", "PATH=/bin",
		       "METER_UNRELATED_TOOL=1", NULL};
	char *env_none[] = {NULL};

	write_file("# comment\n\nlisten = 127.0.0.1:9001\ndatabase_url=postgresql://x@h/db\n"
		   "  http_threads = 3  \n");
	CHECK(config_load(&c, 3, argv_none, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.listen, "127.0.0.1:9001");
	CHECK_STR(c.database_url, "postgresql://x@h/db");
	CHECK_I64(c.http_threads, 3);
	CHECK_STR(c.unknown_environment, "");
	CHECK(config_load(&c, 3, argv_none, env, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.listen, "127.0.0.1:9002");
	CHECK_I64(c.db_pool_size, 5);
	/* A METER_ name that is no option is listed for a warning, by name
	 * only (a misspelt secret's value is not repeated). */
	CHECK_STR(c.unknown_environment, "METER_UNRELATED_TOOL");
	{
		char *typo[] = {"METER_OPERATOR_TOKN=s3cret-value", "METER_CONFIG=", NULL};

		CHECK(config_load(&c, 3, argv_none, typo, &help, err, sizeof(err)) == METER_OK);
		CHECK_STR(c.unknown_environment, "METER_OPERATOR_TOKN");
		CHECK_STR(c.operator_token, "");
	}
	{
		/* A name too long to be an option's is listed too: one over 64
		 * characters (METER_ counted, as README says) by its first 60,
		 * one of 64 whole. */
		static const char chars[] =
		    "A123456789B123456789C123456789D123456789E123456789F123456789G1234";
		char long_name[128], *many[3] = {long_name, "METER_ANOTHER_TOOL=1", NULL};
		char want[128];

		for (int name_len = 63; name_len <= 71; name_len++) {
			int after = name_len - 6; /* characters after METER_ */

			snprintf(long_name, sizeof(long_name), "METER_%.*s=1", after, chars);
			if (name_len > 64)
				snprintf(want, sizeof(want), "METER_%.*s...,METER_ANOTHER_TOOL",
					 60 - 6, chars);
			else
				snprintf(want, sizeof(want), "METER_%.*s,METER_ANOTHER_TOOL", after,
					 chars);
			CHECK(config_load(&c, 3, argv_none, many, &help, err, sizeof(err)) ==
			      METER_OK);
			CHECK_STR(c.unknown_environment, want);
		}
	}
	CHECK(config_load(&c, 5, argv, env, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.listen, "127.0.0.1:9003");
	CHECK(!help);
	unlink(tmpfile_path);
}

static void test_errors(void)
{
	struct meter_config c;
	char err[256];
	bool help;
	char *env_none[] = {NULL};
	char *bad_flag[] = {"meterd", "--no-such-option", "1", NULL};
	char *bad_value[] = {"meterd", "--http-threads", "zero", NULL};
	char *no_value[] = {"meterd", "--listen", NULL};
	char *eq_form[] = {"meterd", "--http-threads=4", "--db_pool_size=9", NULL};
	char *help_argv[] = {"meterd", "--help", NULL};
	char *bad_env[] = {"METER_HTTP_THREADS=-1", NULL};

	CHECK(config_load(&c, 3, bad_flag, env_none, &help, err, sizeof(err)) == METER_ENOTFOUND);
	CHECK(strstr(err, "no-such-option") != NULL);
	CHECK(config_load(&c, 3, bad_value, env_none, &help, err, sizeof(err)) == METER_EINVAL);
	CHECK(strstr(err, "http_threads") != NULL);
	CHECK(config_load(&c, 2, no_value, env_none, &help, err, sizeof(err)) == METER_EINVAL);
	CHECK(config_load(&c, 3, eq_form, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK_I64(c.http_threads, 4);
	CHECK_I64(c.db_pool_size, 9);
	CHECK(config_load(&c, 2, help_argv, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK(help);
	CHECK(config_load(&c, 1, help_argv, bad_env, &help, err, sizeof(err)) != METER_OK);
	CHECK(strstr(err, "METER_HTTP_THREADS") != NULL);
	{
		char *none[] = {"METER_WEBHOOK_CONCURRENCY=0", NULL};
		char *many[] = {"METER_WEBHOOK_CONCURRENCY=33", NULL};
		char *most[] = {"METER_WEBHOOK_CONCURRENCY=32", NULL};

		CHECK(config_load(&c, 1, help_argv, none, &help, err, sizeof(err)) != METER_OK);
		CHECK(strstr(err, "METER_WEBHOOK_CONCURRENCY") != NULL);
		CHECK(config_load(&c, 1, help_argv, many, &help, err, sizeof(err)) != METER_OK);
		CHECK(config_load(&c, 1, help_argv, most, &help, err, sizeof(err)) == METER_OK);
		CHECK_I64(c.webhook_concurrency, 32);
	}

	write_file("listen = 127.0.0.1:1\nbogus = 2\n");
	config_init(&c);
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_ENOTFOUND);
	CHECK(strstr(err, ":2:") != NULL);
	unlink(tmpfile_path);
	write_file("listen 127.0.0.1:1\n");
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
	unlink(tmpfile_path);
	CHECK(config_load_file(&c, "/nonexistent/meter.conf", err, sizeof(err)) == METER_EIO);
	/* A file sets each option once (its two spellings are one option). */
	write_file("listen = 127.0.0.1:1\n# a comment\nhttp_threads = 3\nlisten = 127.0.0.1:2\n");
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
	CHECK_STR(err + strlen(tmpfile_path), ":4: listen is set already, on line 1");
	unlink(tmpfile_path);
	write_file("db_pool_size = 4\ndb-pool-size = 5\n");
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
	CHECK_STR(err + strlen(tmpfile_path), ":2: db_pool_size is set already, on line 1");
	unlink(tmpfile_path);
	/* A byte order mark an editor put first is skipped, there alone. */
	write_file("\xEF\xBB\xBFhttp_threads = 5\r\n");
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_OK);
	CHECK_I64(c.http_threads, 5);
	unlink(tmpfile_path);
	write_file("http_threads = 5\n\xEF\xBB\xBF"
		   "db_pool_size = 4\n");
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
	CHECK(strstr(err, ":2: expected name = value") != NULL);
	unlink(tmpfile_path);
	/* One --config: a second file would not be read. */
	{
		char *two[] = {"meterd", "--config", "/a.conf", "--config=/b.conf", NULL};

		CHECK(config_load(&c, 4, two, env_none, &help, err, sizeof(err)) == METER_EINVAL);
		CHECK(strstr(err, "--config given twice") != NULL);
	}
	/* Each lane of request workers needs a connection of its own: a pool
	 * of one would leave a write waiting for a slow read's. */
	CHECK(config_set(&c, "db_pool_size", "1", err, sizeof(err)) != METER_OK);
	CHECK_STR(err, "db_pool_size: expected an integer in 2..256");
	CHECK(config_set(&c, "db_pool_size", "2", err, sizeof(err)) == METER_OK);
	CHECK_I64(c.db_pool_size, 2);
	/* The database URL is a secret: an error about it never echoes it. */
	{
		char big[CONFIG_STR_MAX + 10];
		memset(big, 'p', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		CHECK(config_set(&c, "database_url", big, err, sizeof(err)) == METER_ERANGE);
		CHECK(strstr(err, "ppppp") == NULL);
	}
	/* A file's line longer than any option's: a comment is skipped; an
	 * option is named with its bound, and its value not echoed. */
	{
		static char text[2 * CONFIG_STR_MAX + 200];
		int n;

		n = snprintf(text, sizeof(text), "# %0*d\nhttp_threads = 5\n", CONFIG_STR_MAX + 200,
			     0);
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		config_init(&c);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_OK);
		CHECK_I64(c.http_threads, 5);
		unlink(tmpfile_path);
		n = snprintf(text, sizeof(text), "listen = 127.0.0.1:1\n database_url = %0*d\n",
			     CONFIG_STR_MAX + 200, 0);
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_ERANGE);
		CHECK_STR(err + strlen(tmpfile_path),
			  ":2: database_url: value too long (at most 1023 bytes)");
		unlink(tmpfile_path);
		n = snprintf(text, sizeof(text), "http_threads = %0*d\n", CONFIG_STR_MAX + 200, 0);
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_ERANGE);
		CHECK_STR(err + strlen(tmpfile_path),
			  ":1: http_threads: value too long (expected an integer in 1..64)");
		unlink(tmpfile_path);
		n = snprintf(text, sizeof(text), "%0*d = 1\n", CONFIG_STR_MAX + 200, 0);
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_ERANGE);
		CHECK_STR(err + strlen(tmpfile_path), ":1: line too long (no option's line is)");
		unlink(tmpfile_path);
	}
	/* Blanks around a name or value, and a comment's indent, count
	 * against no bound: only the value does. */
	{
		static char text[4 * CONFIG_STR_MAX + 16384];
		static char value[CONFIG_STR_MAX];
		int n;

		n = snprintf(text, sizeof(text),
			     "%2000s# an indented comment\n"
			     "listen = %3000s127.0.0.1:23780%3000s\r\n"
			     "%3000shttp_threads%3000s=%3000s7\t\n"
			     "host_id = a \t b\n",
			     "", "", "", "", "", "");
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		config_init(&c);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_OK);
		CHECK_STR(c.listen, "127.0.0.1:23780");
		CHECK_I64(c.http_threads, 7);
		CHECK_STR(c.host_id, "a \t b");
		unlink(tmpfile_path);
		/* A value of its option's bound, however padded, is taken;
		 * one byte more is refused as before. */
		memset(value, 'p', CONFIG_STR_MAX - 1);
		value[CONFIG_STR_MAX - 1] = '\0';
		n = snprintf(text, sizeof(text), "database_url = %3000s%s%3000s\n", "", value, "");
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		config_init(&c);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_OK);
		CHECK_I64((int64_t)strlen(c.database_url), CONFIG_STR_MAX - 1);
		unlink(tmpfile_path);
		n = snprintf(text, sizeof(text), "database_url = %3000s%sp%3000s\n", "", value, "");
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_ERANGE);
		CHECK_STR(err + strlen(tmpfile_path),
			  ":1: database_url: value too long (at most 1023 bytes)");
		unlink(tmpfile_path);
		/* A long run of blanks where the '=' was meant is still told
		 * as such, the line not shown. */
		n = snprintf(text, sizeof(text),
			     "database_url%3000spostgresql://u:S3cretPw@h/db?sslmode=disable\n",
			     "");
		CHECK(n > 0 && (size_t)n < sizeof(text));
		write_file(text);
		CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
		CHECK(strstr(err, "expected name = value, the name of letters") != NULL);
		CHECK(strstr(err, "S3cret") == NULL);
		unlink(tmpfile_path);
	}
	/* A line whose '=' is inside its value (a blank where it was
	 * meant): what comes before it is not echoed as an option's name. */
	write_file("database_url postgresql://u:S3cretPw@127.0.0.1/meter?sslmode=disable\n");
	config_init(&c);
	CHECK(config_load_file(&c, tmpfile_path, err, sizeof(err)) == METER_EINVAL);
	CHECK(strstr(err, "S3cret") == NULL);
	CHECK(strstr(err, "expected name = value") != NULL);
	unlink(tmpfile_path);
}

/* A secret given as a flag is applied, then overwritten in argv (a command
 * line is readable by every local user) and named for the warning; other
 * flags are left as they are. */
static void test_secret_flags(void)
{
	struct meter_config c;
	char err[256];
	bool help;
	char a0[] = "meterd", a1[] = "--operator-token", a2[] = "op-secret-0123",
	     a3[] = "--webhook_secret=wh-secret-4567", a4[] = "--listen", a5[] = "127.0.0.1:9004";
	char *argv[] = {a0, a1, a2, a3, a4, a5, NULL};
	char *env_none[] = {NULL};
	char l0[] = "meterd", l1[] = "--listen=127.0.0.1:9005";
	char *plain[] = {l0, l1, NULL};

	CHECK(config_load(&c, 6, argv, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.operator_token, "op-secret-0123");
	CHECK_STR(c.webhook_secret, "wh-secret-4567");
	CHECK_STR(c.listen, "127.0.0.1:9004");
	CHECK_STR(a2, "xxxxxxxxxxxxxx");
	CHECK_STR(a3, "--webhook_secret=xxxxxxxxxxxxxx");
	CHECK_STR(a1, "--operator-token");
	CHECK_STR(a5, "127.0.0.1:9004");
	CHECK_STR(c.secrets_on_command_line, "operator_token,webhook_secret");
	CHECK(config_load(&c, 2, plain, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.secrets_on_command_line, "");
	CHECK_STR(l1, "--listen=127.0.0.1:9005");
	/* An empty secret flag puts no secret on the command line. */
	char e0[] = "meterd", e1[] = "--session-secret=", e2[] = "--webhook-secret", e3[] = "";
	char *empty[] = {e0, e1, e2, e3, NULL};

	CHECK(config_load(&c, 4, empty, env_none, &help, err, sizeof(err)) == METER_OK);
	CHECK_STR(c.secrets_on_command_line, "");
}

/* --help is answered whatever the file or the environment hold; a
 * "--help" that is an option's value is that value. */
static void test_help_first(void)
{
	struct meter_config c;
	char err[256];
	bool help;
	char *argv[] = {"meterd", "--listen", "127.0.0.1:1", "--help", NULL};
	char *as_value[] = {"meterd", "--host-id", "--help", NULL};
	char *env_bad[] = {"METER_CONFIG=/nonexistent/meter.conf", "METER_HTTP_THREADS=abc", NULL};

	CHECK(config_load(&c, 4, argv, env_bad, &help, err, sizeof(err)) == METER_OK);
	CHECK(help);
	CHECK(config_load(&c, 3, as_value, env_bad, &help, err, sizeof(err)) != METER_OK);
	CHECK(!help);
	/* --help takes no value: one given it is refused, saying so. */
	{
		char *with_value[] = {"meterd", "--help=1", NULL};
		char *env_none[] = {NULL};

		CHECK(config_load(&c, 2, with_value, env_none, &help, err, sizeof(err)) ==
		      METER_EINVAL);
		CHECK_STR(err, "option --help takes no value");
		CHECK(!help);
	}
}

/* The line of text (meterd --help) that describes option name; "" when
 * there is none. Borrowed: a static buffer, overwritten by the next call. */
static const char *usage_line(const char *text, const char *name)
{
	static char line[1024];
	char head[64];
	const char *at, *end;

	snprintf(head, sizeof(head), "\n  --%s ", name);
	at = strstr(text, head);
	if (!at)
		return "";
	at++;
	end = strchr(at, '\n');
	snprintf(line, sizeof(line), "%.*s", (int)(end ? end - at : (ptrdiff_t)strlen(at)), at);
	return line;
}

/* Writes v into out with its thousands grouped by commas, as README
 * writes numbers in its text (100,000; -3,153,600,000). */
static void grouped(long long v, char *out, size_t len)
{
	char digits[32];
	size_t n, o = 0;

	snprintf(digits, sizeof(digits), "%lld", v < 0 ? -v : v);
	n = strlen(digits);
	if (v < 0 && o + 1 < len)
		out[o++] = '-';
	for (size_t i = 0; i < n && o + 1 < len; i++) {
		if (i > 0 && (n - i) % 3 == 0 && o + 2 < len)
			out[o++] = ',';
		out[o++] = digits[i];
	}
	out[o] = '\0';
}

/* README's row of option name in its table of options, less the first
 * cell (which names it, alone or with another); "" when there is none.
 * Borrowed: a static buffer, overwritten by the next call. */
static const char *readme_row(const char *name)
{
	static char readme[256 * 1024], row[8192];
	static bool read;
	char cell[80];
	const char *r;

	if (!read) {
		FILE *f = fopen(METER_SOURCE_DIR "/README.md", "r");
		size_t n = 0;

		CHECK(f != NULL);
		if (f) {
			n = fread(readme, 1, sizeof(readme) - 1, f);
			fclose(f);
		}
		readme[n] = '\0';
		read = true;
	}
	snprintf(cell, sizeof(cell), "`%s`", name);
	for (r = strstr(readme, "\n| `"); r; r = strstr(r + 1, "\n| `")) {
		const char *first_end = strstr(r + 3, " | "), *end = strchr(r + 1, '\n');
		const char *named = strstr(r + 3, cell);

		if (first_end && named && named < first_end && (!end || first_end < end)) {
			first_end += 3;
			snprintf(row, sizeof(row), "%.*s",
				 (int)(end ? end - first_end : (ptrdiff_t)strlen(first_end)),
				 first_end);
			return row;
		}
	}
	return "";
}

/* Every number's bounds and default that --help (text) gives are those of
 * its row in README's table of options: the bounds in its text, the
 * default in its column. */
static void check_readme_numbers(const char *text)
{
	int rows = 0;

	for (const char *at = strstr(text, "\n  --"); at; at = strstr(at + 1, "\n  --")) {
		char name[64], lo[32], hi[32], def[32];
		long long min, max, dflt;
		const char *line = at + 5, *bounds, *row, *end;
		int used = 0;

		if (sscanf(line, "%63[a-z_]", name) != 1)
			continue;
		end = strchr(line, '\n');
		bounds = strstr(line, ", default ");
		if (!end || !bounds || bounds > end)
			continue;
		while (bounds > line && bounds[-1] != '(')
			bounds--;
		if (sscanf(bounds, "%lld to %lld, default %lld)%n", &min, &max, &dflt, &used) !=
			3 ||
		    used == 0)
			continue;
		row = readme_row(name);
		grouped(min, lo, sizeof(lo));
		grouped(max, hi, sizeof(hi));
		snprintf(def, sizeof(def), "%lld | ", dflt);
		if (strncmp(row, def, strlen(def)) != 0 || !strstr(row, hi) ||
		    (min != 0 && !strstr(row, lo)))
			fprintf(stderr, "README's row of %s does not say %s to %s, default %lld\n",
				name, lo, hi, dflt);
		CHECK(strncmp(row, def, strlen(def)) == 0);
		CHECK(strstr(row, hi) != NULL);
		CHECK(min == 0 || strstr(row, lo) != NULL);
		rows++;
	}
	CHECK(rows >= 19);
}

/* --help names each number's bounds beside its default: the bounds a bad
 * value is refused by. */
static void test_usage(void)
{
	char path[] = "/tmp/meter-usage-XXXXXX", text[16384];
	int fd = mkstemp(path), saved = dup(STDOUT_FILENO);
	size_t n = 0;
	FILE *f;

	CHECK(fd >= 0 && saved >= 0);
	if (fd < 0 || saved < 0) {
		if (fd >= 0)
			close(fd);
		if (saved >= 0)
			close(saved);
		unlink(path);
		return;
	}
	fflush(stdout);
	dup2(fd, STDOUT_FILENO);
	config_usage("meterd");
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	f = fdopen(fd, "r");
	if (f) {
		rewind(f);
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
	}
	text[n] = '\0';
	unlink(path);
	CHECK(strstr(text, "(1 to 64, default 2)\n") != NULL);	  /* http_threads */
	CHECK(strstr(text, "(2 to 256, default 8)\n") != NULL);	  /* db_pool_size */
	CHECK(strstr(text, "(0 to 3600, default 60)\n") != NULL); /* request_timeout_s */
	CHECK(strstr(text, "(1 to 32, default 4)\n") != NULL);	  /* webhook_concurrency */
	CHECK(strstr(text, "(default on)\n") != NULL);		  /* collector */
	/* What meterd refuses at start is said there too, as README says
	 * it: the secrets' minimum, and the one option it cannot go without. */
	{
		static const char *const secrets[] = {"operator_token", "control_plane_token",
						      "agent_token", "session_secret",
						      "webhook_secret"};

		for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++) {
			CHECK(strstr(usage_line(text, secrets[i]), "at least 32 bytes") != NULL);
			CHECK(strstr(readme_row(secrets[i]), "at least 32 bytes") != NULL);
		}
		CHECK(strstr(usage_line(text, "database_url"), "required") != NULL);
		CHECK(strstr(readme_row("database_url"), "required") != NULL);
		CHECK(strstr(usage_line(text, "clock_offset_s"), "(-3153600000 to 3153600000,") !=
		      NULL);
	}
	check_readme_numbers(text);
}

static void test_listen(void)
{
	char host[64];
	int port;

	CHECK(config_listen_split("127.0.0.1:8080", host, sizeof(host), &port) == METER_OK);
	CHECK_STR(host, "127.0.0.1");
	CHECK_I64(port, 8080);
	CHECK(config_listen_split("[::1]:0", host, sizeof(host), &port) == METER_OK);
	CHECK_STR(host, "::1");
	CHECK_I64(port, 0);
	CHECK(config_listen_split("::1:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("127.0.0.1", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("127.0.0.1:65536", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split(":80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("[::1]80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("localhost:80", host, sizeof(host), &port) == METER_OK);
	CHECK(config_listen_split("0.0.0.0:80", host, sizeof(host), &port) == METER_OK);
	/* Shorthands getaddrinfo takes: "0" is every interface. */
	CHECK(config_listen_split("0:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("127.1:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("017.0.0.1:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("example.com:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("[127.0.0.1]:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("[::ffff:127.0.0.1]:80", host, sizeof(host), &port) == METER_OK);
	CHECK(config_listen_split("[fe80::1%lo]:80", host, sizeof(host), &port) == METER_OK);
	CHECK_STR(host, "fe80::1%lo");
	CHECK(config_listen_split("[fe80::1%]:80", host, sizeof(host), &port) == METER_EINVAL);
	CHECK(config_listen_split("[fe80::1%a b]:80", host, sizeof(host), &port) == METER_EINVAL);
}

/* The URLs of the configuration are read as the libraries that use them
 * read them: a value no connection or request can succeed with is refused
 * at start, not waited out as an outage. */
static void test_urls(void)
{
	static const struct {
		const char *url;
		bool ok;
	} db[] = {
	    {"postgresql://u:pw@127.0.0.1:5432/db", true},
	    {"postgresql://u:pw@127.0.0.1/db?sslmode=verify-full", true},
	    {"host=a port=' +5 ' dbname=d", true},
	    {"host=a,b port=1,65535", true},
	    {"host=a,b port=,2", true},
	    {"dbname=d target_session_attrs=prefer-standby gssencmode=disable", true},
	    {"postgresql://u@h/db?channel_binding=require", true},
	    {"postgresql://u:pw@[bad", false},
	    {"garbage", false},
	    {"postgresql://u@h/db?sslmode=bogus", false},
	    {"postgresql://u@h/db?sslmode=Require", false},
	    {"dbname=d gssencmode=on", false},
	    {"dbname=d channel_binding=yes", false},
	    {"dbname=d target_session_attrs=Any", false},
	    {"postgresql://h:70000/db", false},
	    {"host=a port=0", false},
	    {"host=a port=65536", false},
	    {"host=a port=' '", false},
	    {"host=a port=5x", false},
	    {"host=a,b port=1,-2", false},
	    {"host=a port=1,2", false},
	    {"host=a,b,c port=1,2", false},
	    {"host=a,b,c port=1,2,3", true},
	    {"host=a,b,c port=7", true},
	    {"postgresql://a:1,b:2/db", true},
	    {"hostaddr=127.0.0.1,127.0.0.2 port=1,2", true},
	    {"hostaddr=127.0.0.1,127.0.0.2 host=a port=1", false},
	    {"hostaddr=127.0.0.1 host=a port=1,2", false},
	    /* A second '@' before the query: a password's, not written %40,
	     * whose rest libpq would read as the host or the database. */
	    {"postgresql://u:pwSE@CRET@127.0.0.1:5432/db", false},
	    {"postgres://u:pw@h/d@b", false},
	    {"postgresql://u:pwSE%40CRET@127.0.0.1:5432/db", true},
	    {"postgresql://u:pw@h/d%40b", true},
	    {"postgresql://h/db?user=u@example", true},
	    {"postgresql://u:pw@h/db?user=u@example", true},
	    {"host=h user=u@example password=pw@x", true},
	};
	static const struct {
		const char *url;
		bool ok;
	} http[] = {
	    {"http://127.0.0.1:8080/hook", true},
	    {"https://[::1]/x?y=1", true},
	    {"HTTPS://example.com", true},
	    {"http://", false},
	    {"https://", false},
	    {"http://:8080/x", false},
	    {"http://u:pw@/x", false},
	    {"ftp://example.com/x", false},
	    {"example.com/x", false},
	    {"http://a b/", false},
	    {"http://a:99999/", false},
	    {"http://a:0/", false},
	    {"http://a:00/x", false},
	    {"http://a:/x", true},
	    {"http://a:65535/x", true},
	};
	char err[128];

	for (size_t i = 0; i < sizeof(db) / sizeof(db[0]); i++) {
		err[0] = '\0';
		if (db_url_ok(db[i].url, err, sizeof(err)) != db[i].ok)
			CHECK_STR(db[i].url, db[i].ok ? "read" : "refused");
		CHECK(strstr(err, "pw") == NULL);
	}
	CHECK(!db_url_ok("postgresql://h/db?sslmode=x", err, sizeof(err)));
	CHECK_STR(err, "sslmode: not a value libpq takes");
	CHECK(!db_url_ok("host=h port=99999", err, sizeof(err)));
	CHECK_STR(err, "port: not a port number (1 to 65535)");
	CHECK(!db_url_ok("postgresql://u:pwSE@CRET@h/db", err, sizeof(err)));
	CHECK(strstr(err, "CRET") == NULL && strstr(err, "%40") != NULL);
	for (size_t i = 0; i < sizeof(http) / sizeof(http[0]); i++) {
		err[0] = '\0';
		if (url_http_ok(http[i].url, err, sizeof(err)) != http[i].ok)
			CHECK_STR(http[i].url, http[i].ok ? "read" : "refused");
		CHECK(http[i].ok || err[0] != '\0');
		CHECK(strstr(err, "pw") == NULL);
	}
	CHECK(!url_http_ok("ftp://h/", err, sizeof(err)));
	CHECK_STR(err, "is not an http:// or https:// URL");
}

int main(void)
{
	test_defaults();
	test_precedence();
	test_errors();
	test_secret_flags();
	test_listen();
	test_help_first();
	test_usage();
	test_urls();
	return check_done();
}
