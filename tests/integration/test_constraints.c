/* Integration: what must never be stored cannot be. Each case is one
 * statement and the SQLSTATE it must end with, run in order against a
 * migrated database holding a small valid fixture. Failing cases break
 * exactly one rule of an otherwise valid row (mostly by UPDATE of a fixture
 * row); valid cases show the rules do not reject everything. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "migrate.h"
#include "testdb.h"

#define OK		"00000"
#define NOT_NULL	"23502"
#define FOREIGN_KEY	"23503"
#define UNIQUE		"23505"
#define CHECK_VIOLATION "23514"
#define CONFLICT	"MTR01" /* a check batch decided on figures that changed */

#define HASH_AB "decode(repeat('ab', 32), 'hex')"
#define HEX_AB	"abababababababababababababababababababababababababababababababab"

#define INS_ACCOUNT "INSERT INTO accounts (account_id, name) VALUES "
#define INS_KEY                                                                                    \
	"INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros,"         \
	" time_zone) VALUES "
#define INS_SBX                                                                                    \
	"INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, storage_mib,"   \
	" state, max_cost_micros) VALUES "
#define INS_SAMPLE                                                                                 \
	"INSERT INTO samples (account_id, sandbox_id, sampled_at, state, cpu_usec, memory_mib,"    \
	" storage_mib, vcpus, host_id) VALUES "
#define INS_METER                                                                                  \
	"INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"          \
	" last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version, cpu_rem,"   \
	" memory_rem, storage_rem, cpu_cum_micros, memory_cum_micros, storage_cum_micros) VALUES "
#define INS_USAGE                                                                                  \
	"INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id,"           \
	" running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, storage_mibus," \
	" cpu_micros, memory_micros, storage_micros, total_micros, cpu_cum_micros,"                \
	" memory_cum_micros, storage_cum_micros, day) VALUES "
#define INS_LEDGER                                                                                 \
	"INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros,"          \
	" limit_micros) VALUES "
#define INS_HOLD                                                                                   \
	"INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, consumed_micros,"  \
	" status, lease_starts_at, lease_ends_at, settled_at) VALUES "
#define INS_IDEM                                                                                   \
	"INSERT INTO idempotency_keys (account_id, operation, idempotency_key, request_sha256,"    \
	" status_code, response) VALUES "
#define INS_EVENT "INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES "
/* A check batch's write (meter_checks_apply) of the idempotency answers I,
 * created sandboxes C, woken sandboxes W and holds H given as array
 * literals; no ledger rows, no answers replaced. */
#define APPLY(I, C, W, H)                                                                          \
	"SELECT meter_checks_apply('2026-11-30T01:00:00Z', '{}', '{}', '{}', '{}', '{}',"          \
	" '{}', '{}', '{}', '{}', " I ", " C ", " W ", " H ")"
#define APPLY_NO_I "'{}', '{}', '{}', '{}', '{}', '{}'"
#define APPLY_NO_C "'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'"
#define APPLY_NO_W "'{}', '{}', '{}'"
#define APPLY_NO_H "'{}', '{}', '{}', '{}', '{}', '{}'"
/* One created sandbox (account, sandbox, key) of 1 vCPU / 512 MiB. */
#define APPLY_C(A, S, K)                                                                           \
	"'{" A "}', '{" S "}', '{" K "}', '{1}', '{512}', '{NULL}', '{2026-11-30T01:15:00Z}',"     \
	" '{" HEX_AB "}', '{\"{1,2,3,20261130,100,0,100,NULL}\"}'"
/* One hold (account, key, sandbox) of 100 µ$ on 2026-11-30. */
#define APPLY_H(A, K, S)                                                                           \
	"'{" A "}', '{" K "}', '{" S "}', '{2026-11-30}', '{100}', '{2026-11-30T01:15:00Z}'"
/* A fast check batch (meter_checks_fast) of plain creates on key_1's
 * ledger row of 2026-11-30, decided on its figures as the cases before
 * leave them (spent 2,000,000, held E, no limit) and leaving it held N,
 * with the key's limit K_LIMIT assumed: creates C and holds H as for
 * APPLY. */
#define FAST(E, N, K_LIMIT, C, H)                                                                  \
	"SELECT count(*) FROM meter_checks_fast('2026-11-30T01:00:00Z', 1, 7, 1, '{}',"            \
	" '{2000000}', '{" E "}', '{NULL}', '{acct_1}', '{key_1}', '{" K_LIMIT "}',"               \
	" '{Europe/Paris}', '{}', '{}', '{}', '{acct_1}', '{key_1}', '{2026-11-30}', '{" N "}',"   \
	" '{NULL}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', " C ","            \
	" '{}', '{}', '{}', " H ")"
/* Fails with division by zero (22012) unless the statement's condition holds. */
#define ASSERT_SQL(COND) "SELECT 1 / (" COND ")::integer"
#define DIV_ZERO	 "22012"
#define INS_PRICE                                                                                  \
	"INSERT INTO price_book (effective_from, cpu_micros_per_vcpu_hour,"                        \
	" memory_micros_per_gib_hour, storage_micros_per_gib_hour, floor_millicores) VALUES "
#define INS_WATERMARK "INSERT INTO ingest_watermarks (host_id, last_sampled_at, batches) VALUES "

#define UPD_USAGE    "UPDATE usage_hourly SET "
#define WHERE_USAGE  " WHERE sandbox_id = 'sbx_1' AND hour = '2026-11-30T01:00:00Z'"
#define UPD_HOLD     "UPDATE holds SET "
#define WHERE_HOLD   " WHERE account_id = 'acct_1' AND hold_id = 1"
#define UPD_METER    "UPDATE sandbox_meter SET "
#define WHERE_SBX    " WHERE sandbox_id = 'sbx_1'"
#define UPD_LEDGER   "UPDATE key_day_ledger SET "
#define WHERE_LEDGER " WHERE key_id = 'key_1' AND day = '2026-11-30'"

struct sql_case {
	const char *want; /* SQLSTATE */
	const char *sql;
};

/* The valid fixture: every statement must succeed. 2 vCPU / 4 GiB idle for
 * the hour 01:00 UTC: 1,250 + 30,000 = 31,250 µ$. */
static const struct sql_case fixture[] = {
    {OK, INS_ACCOUNT "('acct_1', 'Acme'), ('acct_2', 'Other')"},
    {OK, INS_KEY "('acct_1', 'key_1', " HASH_AB ", 'full', 1000000, 'Europe/Paris')"},
    {OK, INS_KEY "('acct_1', 'key_ro', " HASH_AB ", 'read_only', NULL, 'UTC')"},
    {OK, INS_KEY "('acct_2', 'key_2', " HASH_AB ", 'full', NULL, 'America/New_York')"},
    {OK, INS_SBX "('acct_1', 'sbx_1', 'key_1', 2, 4096, 5120, 'running', 20000)"},
    {OK, INS_SBX "('acct_2', 'sbx_2', 'key_2', 1, 1024, 0, 'paused', NULL)"},
    {OK, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:00Z', 'running', 123456789, 4096,"
		    " 5120, 2, 'h1')"},
    {OK, INS_METER "('acct_1', 'sbx_1', '2026-11-30T02:00:00Z', 'running', 123456789, 4096, "
		   "5120, 2, 1, 0, 0, 0, 1250, 30000, 0)"},
    {OK, INS_USAGE "('acct_1', 'sbx_1', '2026-11-30T01:00:00Z', 1, 'key_1', 3600000000, 0,"
		   " 10000000000, 180000000000, 14745600000000, 0, 1250, 30000, 0, 31250, 1250,"
		   " 30000, 0, '2026-11-30')"},
    {OK, INS_LEDGER "('acct_1', 'key_1', '2026-11-30', 0, 20000, 1000000)"},
    {OK, INS_HOLD "('acct_1', 'key_1', 'sbx_1', '2026-11-30', 20000, 0, 'open',"
		  " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {OK, INS_IDEM "('acct_1', 'create', 'sbx_1.create', " HASH_AB ", 200, '{\"allowed\":true}')"},
    {OK, INS_EVENT "('acct_1', 'sbx_1', 'running', '2026-11-30T01:00:00Z')"},
    {OK, INS_WATERMARK "('h1', '2026-11-30T01:00:00Z', 1)"},
};

static const struct sql_case cases[] = {
    /* Ids: 1 to 64 of A-Z a-z 0-9 _ . - */
    {OK, INS_ACCOUNT "(repeat('a', 64), 'sixty-four')"},
    {OK, INS_ACCOUNT "('A.z_0-9', 'every kind of id character')"},
    {CHECK_VIOLATION, INS_ACCOUNT "(repeat('b', 65), 'too long')"},
    {CHECK_VIOLATION, INS_ACCOUNT "('a b', 'space')"},
    {CHECK_VIOLATION, INS_ACCOUNT "('a<b', 'angle')"},
    {CHECK_VIOLATION, INS_ACCOUNT "('', 'empty')"},
    {CHECK_VIOLATION, INS_ACCOUNT "(E'ab\\n', 'trailing newline')"},
    {CHECK_VIOLATION, INS_ACCOUNT "('caf\u00e9', 'not ASCII')"},
    /* 32 characters, 64 bytes: the length is in characters only because
     * every allowed character is one byte (sql/0022). */
    {CHECK_VIOLATION, INS_ACCOUNT "(repeat('\u00e9', 32), 'two bytes each')"},
    {CHECK_VIOLATION, INS_ACCOUNT "(E'a\tb', 'tab')"},
    {NOT_NULL, INS_ACCOUNT "(NULL, 'no id')"},
    {NOT_NULL, INS_ACCOUNT "('acct_3', NULL)"},
    {CHECK_VIOLATION, INS_ACCOUNT "('acct_3', '')"},
    {UNIQUE, INS_ACCOUNT "('acct_1', 'again')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key 9', " HASH_AB ", 'full', NULL, 'UTC')"},
    {CHECK_VIOLATION, INS_SBX "('acct_1', 'sbx<9', 'key_1', 1, 1, 0, 'running', NULL)"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:10Z', 'running', 1, 1,"
				 " 0, 1, 'h 1')"},
    {CHECK_VIOLATION, INS_IDEM "('acct_1', 'wake', 'retry me', " HASH_AB ", 200, '{}')"},
    {CHECK_VIOLATION, INS_WATERMARK "('host/1', now(), 0)"},

    /* API keys. */
    {OK, INS_KEY "('acct_1', 'key_tz', " HASH_AB ", 'full', 0, 'America/Argentina/Buenos_Aires')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'admin', NULL, 'UTC')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'FULL', NULL, 'UTC')"},
    {NOT_NULL, INS_KEY "('acct_1', 'key_9', " HASH_AB ", NULL, NULL, 'UTC')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'Mars/Olympus')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, '+05:00')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'utc')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, '')"},
    /* Names in the zone directory that are not a place's zone (sql/0031). */
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'localtime')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'Factory')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'posixrules')"},
    {CHECK_VIOLATION,
     INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'posix/Europe/Paris')"},
    {OK, INS_KEY "('acct_1', 'key_cst', " HASH_AB ", 'full', NULL, 'CST6CDT')"},
    /* Zones' names PostgreSQL reads as abbreviations (sql/0047). */
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'CET')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'EET')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'MET')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'WET')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'EST')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'GMT')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, 'Zulu')"},
    {OK, INS_KEY "('acct_1', 'key_gmt', " HASH_AB ", 'full', NULL, 'Etc/GMT')"},
    {NOT_NULL, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', NULL, NULL)"},
    {CHECK_VIOLATION, "UPDATE api_keys SET time_zone = 'Nowhere/City' WHERE key_id = 'key_1'"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', decode(repeat('ab', 31), 'hex'), 'full',"
			      " NULL, 'UTC')"},
    {NOT_NULL, INS_KEY "('acct_1', 'key_9', NULL, 'full', NULL, 'UTC')"},
    {CHECK_VIOLATION, INS_KEY "('acct_1', 'key_9', " HASH_AB ", 'full', -1, 'UTC')"},
    {CHECK_VIOLATION, "UPDATE api_keys SET daily_limit_micros = -1 WHERE key_id = 'key_1'"},
    {CHECK_VIOLATION, "UPDATE api_keys SET revoked_at = created_at - interval '1 second'"
		      " WHERE key_id = 'key_1'"},
    {FOREIGN_KEY, INS_KEY "('acct_none', 'key_9', " HASH_AB ", 'full', NULL, 'UTC')"},
    {UNIQUE, INS_KEY "('acct_2', 'key_1', " HASH_AB ", 'full', NULL, 'UTC')"},
    {FOREIGN_KEY, "DELETE FROM accounts WHERE account_id = 'acct_1'"},

    /* Sandboxes. */
    {OK, INS_SBX "('acct_1', 'sbx_big', 'key_1', 1024, 0, 0, 'stopped', 0)"},
    {OK, INS_SBX "('unattributed', 'sbx_u', NULL, 1, 512, 0, 'running', NULL)"},
    {CHECK_VIOLATION, INS_SBX "('acct_1', 'sbx_9', NULL, 1, 512, 0, 'running', NULL)"},
    {FOREIGN_KEY, INS_SBX "('acct_1', 'sbx_9', 'key_nope', 1, 512, 0, 'running', NULL)"},
    {FOREIGN_KEY, INS_SBX "('acct_1', 'sbx_9', 'key_2', 1, 512, 0, 'running', NULL)"},
    {FOREIGN_KEY, INS_SBX "('acct_none', 'sbx_9', 'key_1', 1, 512, 0, 'running', NULL)"},
    {UNIQUE, INS_SBX "('acct_2', 'sbx_1', 'key_2', 1, 512, 0, 'running', NULL)"},
    {UNIQUE, INS_SBX "('acct_1', 'sbx_1', 'key_1', 1, 512, 0, 'running', NULL)"},
    {CHECK_VIOLATION, INS_SBX "('acct_1', 'sbx_9', 'key_1', 1, 512, 0, 'sleeping', NULL)"},
    {NOT_NULL, INS_SBX "('acct_1', 'sbx_9', 'key_1', 1, 512, 0, NULL, NULL)"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET state = 'deleted'" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET vcpus = 0" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET vcpus = 1025" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET memory_mib = -1" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET storage_mib = -1" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET max_cost_micros = -1" WHERE_SBX},
    {CHECK_VIOLATION, "UPDATE sandboxes SET key_id = NULL" WHERE_SBX},

    /* Samples. */
    {OK, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:10Z', 'paused', 0, 0, 0, 1, 'h1')"},
    {UNIQUE, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:10Z', 'running', 1, 1, 0, 1,"
			" 'h2')"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'running', -1,"
				 " 4096, 0, 2, 'h1')"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'running', 1,"
				 " -1, 0, 2, 'h1')"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'running', 1,"
				 " 4096, -1, 2, 'h1')"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'running', 1,"
				 " 4096, 0, 0, 'h1')"},
    {CHECK_VIOLATION, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'zombie', 1,"
				 " 4096, 0, 2, 'h1')"},
    {NOT_NULL, INS_SAMPLE "('acct_1', 'sbx_1', '2026-11-30T01:00:20Z', 'running', 1, 4096, 0,"
			  " 2, NULL)"},
    {NOT_NULL, INS_SAMPLE "('acct_1', 'sbx_1', NULL, 'running', 1, 4096, 0, 2, 'h1')"},
    {FOREIGN_KEY, INS_SAMPLE "('acct_1', 'sbx_nope', '2026-11-30T01:00:20Z', 'running', 1,"
			     " 4096, 0, 2, 'h1')"},
    {FOREIGN_KEY, INS_SAMPLE "('acct_2', 'sbx_1', '2026-11-30T01:00:20Z', 'running', 1, 4096,"
			     " 0, 2, 'h1')"},

    /* Collector state: carries stay within [0, divisor). */
    {OK, UPD_METER "cpu_rem = 3599999999999, memory_rem = 3686399999999,"
		   " storage_rem = 3686399999999" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "cpu_rem = 3600000000000" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "memory_rem = 3686400000000" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "storage_rem = 3686400000000" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "cpu_rem = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "memory_rem = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "storage_rem = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "cpu_cum_micros = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "memory_cum_micros = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "storage_cum_micros = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "last_cpu_usec = -1" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "last_state = 'gone'" WHERE_SBX},
    {CHECK_VIOLATION, UPD_METER "last_vcpus = 0" WHERE_SBX},
    {FOREIGN_KEY, UPD_METER "price_version = 99" WHERE_SBX},
    {FOREIGN_KEY, INS_METER "('acct_1', 'sbx_nope', now(), 'running', 0, 0, 0, 1, 1, 0, 0, 0,"
			    " 0, 0, 0)"},

    /* Hourly usage. */
    {OK, INS_USAGE "('unattributed', 'sbx_u', '2026-11-30T01:00:00Z', 1, NULL, 1800000000,"
		   " 1800000000, 0, 90000000000, 921600000000, 0, 625, 1875, 0, 2500, 625, 1875,"
		   " 0, '2026-11-30')"},
    {CHECK_VIOLATION, INS_USAGE "('acct_1', 'sbx_1', '2026-11-30T02:00:00Z', 1, NULL, 0, 0, 0,"
				" 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '2026-11-30')"},
    {FOREIGN_KEY, INS_USAGE "('acct_1', 'sbx_1', '2026-11-30T02:00:00Z', 1, 'key_2', 0, 0, 0,"
			    " 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '2026-11-30')"},
    {UNIQUE, INS_USAGE "('acct_1', 'sbx_1', '2026-11-30T01:00:00Z', 1, 'key_1', 0, 0, 0, 0, 0,"
		       " 0, 0, 0, 0, 0, 0, 0, 0, '2026-11-30')"},
    {CHECK_VIOLATION, UPD_USAGE "hour = '2026-11-30T01:30:00Z'" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "hour = '2026-11-30T01:00:00.000001Z'" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "hour = '2026-11-30T01:00:00+05:30'" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "total_micros = total_micros + 1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "cpu_billed_mcus = cpu_used_mcus - 1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "paused_usec = 1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "cpu_cum_micros = 0" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "running_usec = -1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "cpu_used_mcus = -1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "cpu_billed_mcus = -1, cpu_used_mcus = -2" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "memory_mibus = -1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "storage_mibus = -1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "cpu_micros = -1, total_micros = 29999" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "memory_micros = -1, total_micros = 1249" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "storage_micros = -1, total_micros = 31249" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "storage_cum_micros = -1" WHERE_USAGE},
    {CHECK_VIOLATION, UPD_USAGE "key_id = NULL" WHERE_USAGE},
    {FOREIGN_KEY, UPD_USAGE "price_version = 99" WHERE_USAGE},
    /* Alignment is to UTC hours whatever the session zone: 07:30 in +05:30 is
     * 02:00 UTC (aligned), 07:00 there is 01:30 UTC (not). */
    {OK, "SET TimeZone = 'Asia/Kolkata'"},
    {OK, UPD_USAGE "hour = '2026-11-30T07:30:00'" WHERE_USAGE},
    {OK, UPD_USAGE "hour = '2026-11-30T01:00:00Z'"
		   " WHERE sandbox_id = 'sbx_1' AND hour = '2026-11-30T02:00:00Z'"},
    {CHECK_VIOLATION, UPD_USAGE "hour = '2026-11-30T07:00:00'" WHERE_USAGE},
    {OK, "SET TimeZone = 'UTC'"},

    /* The key's day ledger. */
    {CHECK_VIOLATION, UPD_LEDGER "spent_micros = -1" WHERE_LEDGER},
    {CHECK_VIOLATION, UPD_LEDGER "held_micros = -1" WHERE_LEDGER},
    {CHECK_VIOLATION, UPD_LEDGER "limit_micros = -1" WHERE_LEDGER},
    {OK, UPD_LEDGER "spent_micros = 2000000, limit_micros = NULL" WHERE_LEDGER},
    {FOREIGN_KEY, INS_LEDGER "('acct_1', 'key_nope', '2026-11-30', 0, 0, NULL)"},
    {FOREIGN_KEY, INS_LEDGER "('acct_1', 'key_2', '2026-11-30', 0, 0, NULL)"},
    {UNIQUE, INS_LEDGER "('acct_1', 'key_1', '2026-11-30', 0, 0, NULL)"},
    {NOT_NULL, INS_LEDGER "('acct_1', 'key_1', NULL, 0, 0, NULL)"},

    /* Holds. */
    {NOT_NULL, INS_HOLD "('acct_1', NULL, 'sbx_1', '2026-11-30', 100, 0, 'open',"
			" '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {FOREIGN_KEY, INS_HOLD "('acct_1', 'key_nope', 'sbx_1', '2026-11-30', 100, 0, 'open',"
			   " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {FOREIGN_KEY, INS_HOLD "('acct_1', 'key_2', 'sbx_1', '2026-11-30', 100, 0, 'open',"
			   " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {FOREIGN_KEY, INS_HOLD "('acct_1', 'key_1', 'sbx_nope', '2026-11-30', 100, 0, 'open',"
			   " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    /* A check batch checks the references of its rows itself (the
     * triggers pass over its inserts): each key of its account, each hold
     * of a sandbox the batch creates or wakes, each answer's account. */
    {FOREIGN_KEY, APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_9", "key_2"), APPLY_NO_W, APPLY_NO_H)},
    {FOREIGN_KEY,
     APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_9", "key_nope"), APPLY_NO_W, APPLY_NO_H)},
    {FOREIGN_KEY, APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_9", "key_1"), APPLY_NO_W,
			APPLY_H("acct_1", "key_2", "sbx_9"))},
    {FOREIGN_KEY, APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_9", "key_1"), APPLY_NO_W,
			APPLY_H("acct_1", "key_1", "sbx_1"))},
    {FOREIGN_KEY, APPLY(APPLY_NO_I, APPLY_NO_C, APPLY_NO_W, APPLY_H("acct_1", "key_1", "sbx_1"))},
    {FOREIGN_KEY, APPLY("'{acct_none}', '{create}', '{k9}', '{" HEX_AB "}', '{200}', '{\"{}\"}'",
			APPLY_NO_C, APPLY_NO_W, APPLY_NO_H)},
    /* A valid batch, and after it, in the same transaction, the triggers
     * check other writers again. */
    {FOREIGN_KEY,
     APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_8", "key_1"), APPLY_NO_W,
	   APPLY_H("acct_1", "key_1",
		   "sbx_8")) ";" INS_HOLD
			     "('acct_1', 'key_1', 'sbx_nope', '2026-11-30', 100, 0, 'open',"
			     " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {OK, APPLY(APPLY_NO_I, APPLY_C("acct_1", "sbx_8", "key_1"), APPLY_NO_W,
	       APPLY_H("acct_1", "key_1", "sbx_8"))},
    /* A fast batch of plain creates proves its references from its own
     * arrays (sql/0026): every sandbox and hold of the one key checked,
     * every hold of a sandbox it creates; a key not as assumed is a
     * conflict; a ledger row that differs comes back and nothing is
     * written. The valid batch writes one sandbox, one hold and the
     * ledger's new figure. */
    {FOREIGN_KEY, FAST("20000", "20100", "1000000", APPLY_C("acct_1", "sbx_f1", "key_2"),
		       APPLY_H("acct_1", "key_1", "sbx_f1"))},
    {FOREIGN_KEY, FAST("20000", "20100", "1000000", APPLY_C("acct_2", "sbx_f1", "key_1"),
		       APPLY_H("acct_1", "key_1", "sbx_f1"))},
    {FOREIGN_KEY, FAST("20000", "20100", "1000000", APPLY_C("acct_1", "sbx_f1", "key_1"),
		       APPLY_H("acct_1", "key_2", "sbx_f1"))},
    {FOREIGN_KEY, FAST("20000", "20100", "1000000", APPLY_C("acct_1", "sbx_f1", "key_1"),
		       APPLY_H("acct_1", "key_1", "sbx_1"))},
    {FOREIGN_KEY, FAST("20000", "20100", "1000000", APPLY_C("acct_1", "sbx_f1", "key_1"),
		       APPLY_H("acct_2", "key_1", "sbx_f1"))},
    {CONFLICT, FAST("20000", "20100", "5", APPLY_C("acct_1", "sbx_f1", "key_1"),
		    APPLY_H("acct_1", "key_1", "sbx_f1"))},
    {OK, ASSERT_SQL("(" FAST("19999", "20099", "1000000", APPLY_C("acct_1", "sbx_f1", "key_1"),
			     APPLY_H("acct_1", "key_1", "sbx_f1")) ") = 1")},
    {OK, ASSERT_SQL("NOT EXISTS (SELECT 1 FROM sandboxes WHERE sandbox_id = 'sbx_f1')")},
    {OK, ASSERT_SQL("(" FAST("20000", "20100", "1000000", APPLY_C("acct_1", "sbx_f1", "key_1"),
			     APPLY_H("acct_1", "key_1", "sbx_f1")) ") = 0")},
    {OK, ASSERT_SQL("(SELECT held_micros FROM key_day_ledger" WHERE_LEDGER ") = 20100")},
    {DIV_ZERO, ASSERT_SQL("false")},
    /* Its stored answer: the request's hash with its numbers (sql/0025)
     * or, on rows from before, its text; never neither nor both, and
     * numbers of an answer's shape. */
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = NULL WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_response = '{}' WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_request_sha256 = NULL"
		      " WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = '{1,2,3,20261130,100,0,100}'"
		      " WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION,
     "UPDATE sandboxes SET create_answer = '{1,2,3,20261130,100,0,100,NULL,20261201}'"
     " WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = '[0:7]={1,2,3,20261130,100,0,100,1}'"
		      " WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = '{{1,2,3,4,5,6,7,8}}'"
		      " WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = '{}' WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, "UPDATE sandboxes SET create_answer = NULL, create_request_sha256 = NULL,"
		      " create_response = '{}' WHERE sandbox_id = 'sbx_8'"},
    {OK, "UPDATE sandboxes SET create_answer = NULL, create_response = '{}'"
	 " WHERE sandbox_id = 'sbx_8'"},
    {OK, "UPDATE sandboxes SET create_answer = '{1,2,3,20261130,100,0,100,NULL,20261201,1,2,3,4}',"
	 " create_response = NULL WHERE sandbox_id = 'sbx_8'"},
    {CHECK_VIOLATION, INS_HOLD "('acct_1', 'key_1', 'sbx_1', '2026-11-30', -1, 0, 'open',"
			       " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {CHECK_VIOLATION, INS_HOLD "('acct_1', 'key_1', 'sbx_1', '2026-11-30', 100, 0, 'settled',"
			       " '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {CHECK_VIOLATION, INS_HOLD "('acct_1', 'key_1', 'sbx_1', '2026-11-30', 100, 0, 'open',"
			       " '2026-11-30T01:00:00Z', '2026-11-30T00:59:59Z', NULL)"},
    {NOT_NULL, INS_HOLD "('acct_1', 'key_1', 'sbx_1', NULL, 100, 0, 'open',"
			" '2026-11-30T01:00:00Z', '2026-11-30T01:15:00Z', NULL)"},
    {OK, INS_HOLD "('acct_1', 'key_1', 'sbx_1', '2026-11-30', 100, 100, 'released',"
		  " '2026-11-30T01:00:00Z', '2026-11-30T01:00:00Z', '2026-11-30T01:00:00Z')"},
    {CHECK_VIOLATION, UPD_HOLD "amount_micros = -1" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "consumed_micros = -1" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "status = 'pending'" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "lease_ends_at = lease_starts_at - interval '1 us'" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "settled_at = now()" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "status = 'settled'" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "status = 'released'" WHERE_HOLD},
    {NOT_NULL, UPD_HOLD "key_id = NULL" WHERE_HOLD},
    /* Settled to the metered cost, which may exceed the hold. */
    {OK, UPD_HOLD "status = 'settled', settled_at = now(), consumed_micros = 25000" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "settled_at = NULL" WHERE_HOLD},
    {CHECK_VIOLATION, UPD_HOLD "status = 'open'" WHERE_HOLD},

    /* Idempotency keys. */
    {OK, INS_IDEM "('acct_1', 'wake', 'sbx_1.create', " HASH_AB ", 402, '{}')"},
    {UNIQUE, INS_IDEM "('acct_1', 'create', 'sbx_1.create', " HASH_AB ", 200, '{}')"},
    {CHECK_VIOLATION, INS_IDEM "('acct_1', 'delete', 'k1', " HASH_AB ", 200, '{}')"},
    {CHECK_VIOLATION, INS_IDEM "('acct_1', 'create', 'k1', decode(repeat('ab', 33), 'hex'),"
			       " 200, '{}')"},
    {CHECK_VIOLATION, INS_IDEM "('acct_1', 'create', 'k1', " HASH_AB ", 99, '{}')"},
    {CHECK_VIOLATION, INS_IDEM "('acct_1', 'create', 'k1', " HASH_AB ", 600, '{}')"},
    {NOT_NULL, INS_IDEM "('acct_1', 'create', 'k1', " HASH_AB ", 200, NULL)"},
    {FOREIGN_KEY, INS_IDEM "('acct_none', 'create', 'k1', " HASH_AB ", 200, '{}')"},

    /* Lifecycle events: recorded once each. */
    {UNIQUE, INS_EVENT "('acct_1', 'sbx_1', 'running', '2026-11-30T01:00:00Z')"},
    {UNIQUE, INS_EVENT "('acct_1', 'sbx_1', 'running', '2026-11-30T02:00:00+01:00')"},
    {OK, INS_EVENT "('acct_1', 'sbx_1', 'paused', '2026-11-30T01:00:00Z')"},
    {OK, INS_EVENT "('acct_1', 'sbx_1', 'running', '2026-11-30T01:00:00.000001Z')"},
    {CHECK_VIOLATION, INS_EVENT "('acct_1', 'sbx_1', 'exploded', '2026-11-30T03:00:00Z')"},
    {NOT_NULL, INS_EVENT "('acct_1', 'sbx_1', 'stopped', NULL)"},
    {FOREIGN_KEY, INS_EVENT "('acct_1', 'sbx_nope', 'stopped', '2026-11-30T03:00:00Z')"},

    /* The price book. */
    {OK, INS_PRICE "('2027-01-01T00:00:00Z', 30000, 8000, 100, 50)"},
    {UNIQUE, INS_PRICE "('1970-01-01T00:00:00Z', 30000, 8000, 100, 50)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', -1, 8000, 100, 50)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', 30000, -1, 100, 50)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', 30000, 8000, -1, 50)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', 1000000000001, 8000, 100, 50)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', 30000, 8000, 100, -1)"},
    {CHECK_VIOLATION, INS_PRICE "('2028-01-01T00:00:00Z', 30000, 8000, 100, 1000001)"},
    {CHECK_VIOLATION, "UPDATE price_book SET free_sandbox_hours = -1 WHERE version = 1"},

    /* Collector watermarks. */
    {UNIQUE, INS_WATERMARK "('h1', now(), 0)"},
    {CHECK_VIOLATION, "UPDATE ingest_watermarks SET batches = -1 WHERE host_id = 'h1'"},
    {NOT_NULL, INS_WATERMARK "('h2', NULL, 0)"},
};

/* Runs one case; prints the statement when its SQLSTATE is not the one wanted. */
static void run_case(PGconn *conn, const char *what, size_t i, const struct sql_case *c)
{
	const char *got = testdb_exec_state(conn, c->sql);

	if (strcmp(got, c->want) != 0)
		fprintf(stderr, "%s %zu: got %s, want %s: %s\n", what, i, got, c->want, c->sql);
	CHECK_STR(got, c->want);
}

int main(void)
{
	struct testdb db;
	char err[512] = "";
	char buf[256], answer[1024];
	int applied = 0;

	if (testdb_create(&db, "constraints") != 0) {
		CHECK(0);
		return check_done();
	}
	CHECK_I64(migrate_apply(db.conn, &applied, err, sizeof(err)), METER_OK);
	if (err[0])
		fprintf(stderr, "migrate_apply: %s\n", err);

	for (size_t i = 0; i < sizeof(fixture) / sizeof(fixture[0]); i++)
		run_case(db.conn, "fixture", i, &fixture[i]);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(db.conn, "case", i, &cases[i]);

	/* Nothing refused slipped in, nothing valid was lost. */
	testdb_query_text(
	    db.conn,
	    "SELECT format('%s %s %s %s %s %s %s', (SELECT count(*) FROM accounts),"
	    " (SELECT count(*) FROM api_keys), (SELECT count(*) FROM sandboxes),"
	    " (SELECT count(*) FROM samples), (SELECT count(*) FROM holds),"
	    " (SELECT count(*) FROM usage_hourly), (SELECT count(*) FROM lifecycle_events))",
	    buf, sizeof(buf));
	CHECK_STR(buf, "5 6 6 2 4 2 3");
	/* A create's answer kept as numbers reads back as its text. */
	testdb_query_text(db.conn,
			  "SELECT response FROM check_answers WHERE idempotency_key = 'sbx_8'",
			  answer, sizeof(answer));
	CHECK_STR(answer,
		  "{\"allowed\":true,\"sandbox_id\":\"sbx_8\",\"key_id\":\"key_1\","
		  "\"hold_micros\":101,\"lease_max_cost_micros\":3,\"day\":\"2026-11-30\","
		  "\"day_spent_micros\":0,\"day_held_micros\":100,\"daily_limit_micros\":null,"
		  "\"lease_starts_at\":\"1970-01-01T00:00:00.000001Z\","
		  "\"lease_ends_at\":\"1970-01-01T00:00:00.000002Z\",\"parts\":[{\"day\":"
		  "\"2026-11-30\",\"hold_micros\":100,\"day_spent_micros\":0,"
		  "\"day_held_micros\":100,\"daily_limit_micros\":null},{\"day\":"
		  "\"2026-12-01\",\"hold_micros\":1,\"day_spent_micros\":2,"
		  "\"day_held_micros\":3,\"daily_limit_micros\":4}]}");
	testdb_query_text(db.conn,
			  "SELECT format('%s %s %s %s', status, consumed_micros, amount_micros,"
			  " settled_at IS NOT NULL) FROM holds WHERE hold_id = 1",
			  buf, sizeof(buf));
	CHECK_STR(buf, "settled 25000 20000 t");
	testdb_query_text(db.conn,
			  "SELECT format('%s %s', hour, total_micros) FROM usage_hourly"
			  " WHERE sandbox_id = 'sbx_1'",
			  buf, sizeof(buf));
	CHECK_STR(buf, "2026-11-30 01:00:00+00 31250");

	testdb_drop(&db);
	return check_done();
}
