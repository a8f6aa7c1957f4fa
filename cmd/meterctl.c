/* meterctl: the command-line tool of meter. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl_args.h"

struct command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *help;
};

static const struct command commands[] = {
    {"migrate", ctl_migrate_main, "apply the database migrations"},
    {"account", ctl_account_main, "account create: create an account"},
    {"key", ctl_key_main,
     "key create|revoke: create an API key (its secret is shown once), or revoke one"},
    {"price", ctl_price_main, "price a period of one sandbox's usage"},
    {"lease-cost", ctl_lease_cost_main, "worst-case cost of a lease (what a hold reserves)"},
    {"report", ctl_report_main,
     "report usage|statement: usage exports and monthly statements (CSV, NDJSON, HTML)"},
    {"simulate", ctl_simulate_main,
     "a simulated fleet of host agents (--listen HOST:PORT serves, --push URL pushes)"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: meterctl COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\n'meterctl COMMAND --help' describes a command's options. The commands that"
		   " use the\ndatabase work in the schema METER_DATABASE_SCHEMA names (default:"
		   " public).\n");
}

/* Standard input, output and error, each open: one that is closed would be
 * taken by the next file opened, the database's connection say, and what
 * meterctl prints (a key's secret) would go there. A closed standard
 * output is refused: what it would print (a secret shown once) would be
 * lost. The others are given /dev/null. False after saying so. */
static bool std_fds_open(void)
{
	bool out_closed = fcntl(STDOUT_FILENO, F_GETFD) == -1 && errno == EBADF;

	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
			continue;
		int nul = open("/dev/null", O_RDWR);

		if (nul != fd) { /* the lowest free descriptor: fd itself */
			if (nul >= 0)
				close(nul);
			return false;
		}
	}
	if (out_closed) {
		fprintf(stderr, "meterctl: standard output is closed: nothing done\n");
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	if (!std_fds_open())
		return 1;
	/* A reader that goes away (meterctl ... | head) is a failed write,
	 * handled where it happens (a key not created), not a silent death. */
	signal(SIGPIPE, SIG_IGN);
	/* Once, before any thread: the sub-commands that speak HTTP use libcurl. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "meterctl: cannot initialise libcurl\n");
		return 1;
	}
	if (argc < 2) {
		fprintf(stderr, "meterctl: missing command (try meterctl --help)\n");
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (ctl_arg_help_with_value(argv[1])) {
		fprintf(stderr, "meterctl: %s takes no value\n", ctl_arg_help_with_value(argv[1]));
		return 2;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].main(argc - 1, argv + 1);
	fprintf(stderr, "meterctl: unknown command \"%.64s\" (try meterctl --help)\n", argv[1]);
	return 2;
}
