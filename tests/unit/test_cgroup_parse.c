/* Unit tests for meter/source_cgroup.c on fake cgroup trees in a temporary
 * directory: cgroup v2 (cpu.stat, memory.max, cpu.max) and v1 (cpuacct.usage
 * with a sibling memory hierarchy). Exact values, "max" and unlimited,
 * missing files, vanished directories, bad ids and garbage per sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "source_cgroup.h"

#define NOW_USEC INT64_C(1796040000000000)

static char base[256];

/* Creates base/rel (and its parents) as a directory. */
static void mkdirs(const char *rel)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/%s", base, rel);
	for (char *p = path + strlen(base) + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) != 0 && errno != EEXIST)
			CHECK(0);
		*p = '/';
	}
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		CHECK(0);
}

/* Writes text into base/rel, creating the directories on the way. */
static void put(const char *rel, const char *text)
{
	char path[1024], dir[1024];
	const char *slash = strrchr(rel, '/');
	FILE *f;

	if (slash) {
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rel), rel);
		mkdirs(dir);
	}
	snprintf(path, sizeof(path), "%s/%s", base, rel);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(fputs(text, f) >= 0);
	CHECK(fclose(f) == 0);
}

static const char *at(const char *rel)
{
	static char path[1024];

	snprintf(path, sizeof(path), "%s/%s", base, rel);
	return path;
}

static const struct meter_sample *find(const struct sample_batch *b, const char *id)
{
	for (size_t i = 0; i < b->n; i++)
		if (strcmp(b->items[i].sandbox_id, id) == 0)
			return &b->items[i];
	return NULL;
}

/* Checks one sandbox of b: cpu µs, memory MiB (or SAMPLE_UNKNOWN), vCPUs (0
 * = unknown). */
static void expect(const struct sample_batch *b, const char *id, int64_t cpu, int64_t mem,
		   int vcpus)
{
	const struct meter_sample *s = find(b, id);

	if (!s)
		fprintf(stderr, "sandbox %s missing\n", id);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_I64(s->u.cpu_usec, cpu);
	CHECK_I64(s->u.memory_mib, mem);
	CHECK_I64(s->u.vcpus, vcpus);
	CHECK_I64(s->u.storage_mib, SAMPLE_UNKNOWN);
	CHECK_I64(s->u.at_usec, NOW_USEC);
	/* A cgroup does not tell a paused VM from a running one. */
	CHECK(s->state_from_events);
	CHECK_STR(s->key_id, "");
}

static void test_v2(void)
{
	struct sample_batch b;
	char err[256];

	put("v2/cgroup.controllers", "");
	put("v2/cpu.stat", "usage_usec 1\n");
	put("v2/sbx_a/cpu.stat", "usage_usec 123456789\nuser_usec 100000000\n"
				 "system_usec 23456789\nnr_periods 0\n");
	put("v2/sbx_a/memory.max", "4294967296\n");
	put("v2/sbx_a/cpu.max", "200000 100000\n");
	put("v2/sbx_b/cpu.stat", "user_usec 5\nusage_usec 0\n");
	put("v2/sbx_b/memory.max", "max\n");
	put("v2/sbx_b/cpu.max", "max 100000\n");
	put("v2/sbx_c/cpu.stat", "usage_usec 4611686018427387904"); /* 2^62, no newline */
	put("v2/sbx.d-1/cpu.stat", "usage_usec 7\n");
	put("v2/sbx.d-1/cpu.max", "150000 100000\n"); /* 1.5 vCPUs: 2 */
	put("v2/sbx.d-1/memory.max", "1048575");      /* just under 1 MiB: 0 */
	put("v2/sbx_e/cpu.stat", "usage_usec 8\n");
	put("v2/sbx_e/memory.max", "9223372036854771712\n"); /* unlimited */
	put("v2/sbx_e/cpu.max", "1000 100000\n");	     /* 0.01 vCPU: 1 */
	put("v2/sbx_f/cpu.stat", "usage_usec 9\n");
	put("v2/sbx_f/cpu.max", "102400000 100000\n");	/* exactly 1024 */
	put("v2/sbx_f/memory.max", "17592186044416\n"); /* 16 TiB */
	/* Skipped: bad ids, garbage, missing or vanished files. */
	put("v2/bad id/cpu.stat", "usage_usec 1\n");
	put("v2/s\xc3\xa9/cpu.stat", "usage_usec 1\n");
	put("v2/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx/cpu.stat",
	    "usage_usec 1\n"); /* 65 characters */
	put("v2/g_alpha/cpu.stat", "usage_usec abc\n");
	put("v2/g_noline/cpu.stat", "user_usec 5\nsystem_usec 6\n");
	put("v2/g_negative/cpu.stat", "usage_usec -5\n");
	put("v2/g_trailing/cpu.stat", "usage_usec 5 6\n");
	put("v2/g_toobig/cpu.stat", "usage_usec 4611686018427387905\n");
	put("v2/g_empty/cpu.stat", "");
	put("v2/g_mem/cpu.stat", "usage_usec 5\n");
	put("v2/g_mem/memory.max", "12 MiB\n");
	put("v2/g_mem2/cpu.stat", "usage_usec 5\n");
	put("v2/g_mem2/memory.max", "-1\n");
	put("v2/g_cpumax/cpu.stat", "usage_usec 5\n");
	put("v2/g_cpumax/cpu.max", "100000\n");
	put("v2/g_cpumax0/cpu.stat", "usage_usec 5\n");
	put("v2/g_cpumax0/cpu.max", "0 100000\n");
	put("v2/g_cpumaxbig/cpu.stat", "usage_usec 5\n");
	put("v2/g_cpumaxbig/cpu.max", "102400001 100000\n");
	put("v2/g_period0/cpu.stat", "usage_usec 5\n");
	put("v2/g_period0/cpu.max", "100000 0\n");
	mkdirs("v2/gone_empty"); /* no files at all */
	mkdirs("v2/gone_link");	 /* cpu.stat dangling: removed mid-read */
	CHECK(symlink("/nonexistent/meter/cpu.stat", at("v2/gone_link/cpu.stat")) == 0);
	put("v2/not_a_dir", "usage_usec 1\n"); /* a file in the root is not a sandbox */
	{
		char target[1024];

		snprintf(target, sizeof(target), "%s", at("v2/sbx_a"));
		CHECK(symlink(target, at("v2/link_to_sbx")) == 0); /* not a sandbox */
	}

	CHECK(cgroup_detect(at("v2")) == CGROUP_V2);
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("v2"), "host-1", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_STR(b.host_id, "host-1");
	CHECK_I64(b.sampled_at_usec, NOW_USEC);
	CHECK_I64(b.n, 6);
	expect(&b, "sbx_a", 123456789, 4096, 2);
	expect(&b, "sbx_b", 0, SAMPLE_UNKNOWN, 0);
	expect(&b, "sbx_c", INT64_C(4611686018427387904), SAMPLE_UNKNOWN, 0);
	expect(&b, "sbx.d-1", 7, 0, 2);
	expect(&b, "sbx_e", 8, SAMPLE_UNKNOWN, 1);
	expect(&b, "sbx_f", 9, INT64_C(16777216), 1024);
	/* Sorted by id. */
	for (size_t i = 1; i < b.n; i++)
		CHECK(strcmp(b.items[i - 1].sandbox_id, b.items[i].sandbox_id) < 0);
	sample_batch_release(&b);

	/* Reading again after a sandbox is removed and one appears. */
	CHECK(unlink(at("v2/sbx_c/cpu.stat")) == 0 && rmdir(at("v2/sbx_c")) == 0);
	put("v2/sbx_new/cpu.stat", "usage_usec 42\n");
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("v2"), "host-1", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_I64(b.n, 6);
	CHECK(find(&b, "sbx_c") == NULL);
	expect(&b, "sbx_new", 42, SAMPLE_UNKNOWN, 0);
	sample_batch_release(&b);

	/* Detection from a sub-directory when the root has no files. */
	put("v2sub/sbx_a/cpu.stat", "usage_usec 3\n");
	CHECK(cgroup_detect(at("v2sub")) == CGROUP_V2);
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("v2sub"), "h", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_I64(b.n, 1);
	expect(&b, "sbx_a", 3, SAMPLE_UNKNOWN, 0);
	sample_batch_release(&b);
}

static void test_v1(void)
{
	struct sample_batch b;
	char err[256];

	put("fs/cpuacct/pool/cpuacct.usage", "5000000000\n");
	put("fs/cpuacct/pool/sbx_a/cpuacct.usage", "1234567891\n"); /* ns: 1234567 µs */
	put("fs/cpuacct/pool/sbx_b/cpuacct.usage", "999\n");	    /* under 1 µs */
	put("fs/cpuacct/pool/sbx_c/cpuacct.usage", "4611686018427387904999");
	put("fs/cpuacct/pool/sbx_d/cpuacct.usage", "2000\n");
	put("fs/cpuacct/pool/g_alpha/cpuacct.usage", "12x\n");
	put("fs/cpuacct/pool/g_neg/cpuacct.usage", "-1\n");
	put("fs/cpuacct/pool/g_mem/cpuacct.usage", "1000\n");
	put("fs/cpuacct/pool/bad:id/cpuacct.usage", "1000\n");
	mkdirs("fs/cpuacct/pool/gone");
	put("fs/memory/pool/sbx_a/memory.limit_in_bytes", "536870912\n");
	put("fs/memory/pool/sbx_b/memory.limit_in_bytes", "9223372036854771712\n");
	/* sbx_d has no memory directory: unknown. */
	put("fs/memory/pool/g_mem/memory.limit_in_bytes", "lots\n");

	CHECK(cgroup_detect(at("fs/cpuacct/pool")) == CGROUP_V1);
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("fs/cpuacct/pool"), "h1", NOW_USEC, &b, err, sizeof(err)) ==
	      METER_OK);
	CHECK_I64(b.n, 3);
	expect(&b, "sbx_a", 1234567, 512, 0);
	expect(&b, "sbx_b", 0, SAMPLE_UNKNOWN, 0);
	expect(&b, "sbx_d", 2, SAMPLE_UNKNOWN, 0);
	sample_batch_release(&b);

	/* cpu and cpuacct mounted together, as many distributions do: the
	 * cpu controller's v1 cpu.stat (no usage_usec) beside cpuacct.usage
	 * is still v1. */
	put("fs2/cpu,cpuacct/pool/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n");
	put("fs2/cpu,cpuacct/pool/cpuacct.usage", "7000\n");
	put("fs2/cpu,cpuacct/pool/sbx_a/cpu.stat", "nr_periods 0\nnr_throttled 0\n");
	put("fs2/cpu,cpuacct/pool/sbx_a/cpuacct.usage", "3000\n");
	put("fs2/cpu,cpuacct/pool/sbx_b/cpu.stat", "nr_periods 0\nnr_throttled 0\n");
	put("fs2/cpu,cpuacct/pool/sbx_b/cpuacct.usage", "4000\n");
	put("fs2/memory/pool/sbx_a/memory.limit_in_bytes", "1073741824\n");
	CHECK(cgroup_detect(at("fs2/cpu,cpuacct/pool")) == CGROUP_V1);
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("fs2/cpu,cpuacct/pool"), "h1", NOW_USEC, &b, err, sizeof(err)) ==
	      METER_OK);
	CHECK_I64(b.n, 2);
	expect(&b, "sbx_a", 3, 1024, 0);
	expect(&b, "sbx_b", 4, SAMPLE_UNKNOWN, 0);
	sample_batch_release(&b);

	/* No memory hierarchy at all (no cpuacct component to replace). */
	put("plainv1/sbx_a/cpuacct.usage", "5000\n");
	sample_batch_init(&b);
	CHECK(cgroup_read_all(at("plainv1"), "h1", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_I64(b.n, 1);
	expect(&b, "sbx_a", 5, SAMPLE_UNKNOWN, 0);
	sample_batch_release(&b);
}

static void test_roots(void)
{
	struct sample_batch b;
	char err[256];

	/* Missing root, a file as root: METER_EIO with a reason. */
	sample_batch_init(&b);
	err[0] = '\0';
	CHECK(cgroup_read_all(at("nonexistent"), "h1", NOW_USEC, &b, err, sizeof(err)) ==
	      METER_EIO);
	CHECK(strstr(err, "nonexistent") != NULL);
	CHECK(b.n == 0 && b.items == NULL);
	put("afile", "x");
	err[0] = '\0';
	CHECK(cgroup_read_all(at("afile"), "h1", NOW_USEC, &b, err, sizeof(err)) == METER_EIO);
	CHECK(err[0] != '\0');
	CHECK(cgroup_detect(at("nonexistent")) == CGROUP_UNKNOWN);

	/* An empty root: no sandboxes yet. */
	mkdirs("emptyroot");
	CHECK(cgroup_detect(at("emptyroot")) == CGROUP_UNKNOWN);
	CHECK(cgroup_read_all(at("emptyroot"), "h1", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_I64(b.n, 0);
	sample_batch_release(&b);

	/* Directories without any cgroup file: not a cgroup tree. */
	mkdirs("plain/a");
	mkdirs("plain/b");
	sample_batch_init(&b);
	err[0] = '\0';
	CHECK(cgroup_read_all(at("plain"), "h1", NOW_USEC, &b, err, sizeof(err)) == METER_EIO);
	CHECK(strstr(err, "neither cgroup v1 nor v2") != NULL);
	CHECK(b.n == 0 && b.items == NULL);

	/* A bad host id. */
	CHECK(cgroup_read_all(at("v2"), "bad host", NOW_USEC, &b, err, sizeof(err)) ==
	      METER_EINVAL);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	snprintf(base, sizeof(base), "/tmp/meter-cgroup-test-XXXXXX");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	test_v2();
	test_v1();
	test_roots();
	if (nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		CHECK(0);
	return check_done();
}
