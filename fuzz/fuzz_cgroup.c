/* Fuzzer: cgroup file parsing (meter/source_cgroup.c), through
 * cgroup_read_all on a real directory tree that the input writes.
 *
 * Input: a flags byte, then up to three file contents separated by 0xff
 * bytes. Flags bit 0: cgroup v1 (else v2); bits 1-3: which of the three
 * files exist. v2 files: cpu.stat, memory.max, cpu.max of one sandbox;
 * v1 files: cpuacct.usage and, in the sibling memory hierarchy,
 * memory.limit_in_bytes (the third is unused).
 *
 * Invariants: the batch is what an independent reading of the same files,
 * written here to the documented rules, expects: the sandbox skipped or
 * read, with the same CPU time, vCPUs and memory, every unknown marked as
 * such. The tree lives in a temporary directory (in /dev/shm when it is
 * writable) removed at exit. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "source_cgroup.h"

#define NOW_USEC     INT64_C(1796083200000000)
#define UNLIMITED    (INT64_C(1) << 62)
#define CPU_USEC_MAX (INT64_C(1) << 62)
#define FILE_MAX     4096 /* bytes of one file written; cgroup files are smaller */
#define SANDBOX	     "sbx-1"

static char base[256];

/* The files the tree may hold, relative to base. */
static const char *const v2_files[] = {"v2/" SANDBOX "/cpu.stat", "v2/" SANDBOX "/memory.max",
				       "v2/" SANDBOX "/cpu.max"};
static const char *const v1_files[] = {"cpuacct/" SANDBOX "/cpuacct.usage",
				       "memory/" SANDBOX "/memory.limit_in_bytes", NULL};

static void path_of(const char *rel, char *out, size_t len)
{
	int w = snprintf(out, len, "%s/%s", base, rel);

	FUZZ_CHECK(w > 0 && (size_t)w < len);
}

static void put(const char *rel, const uint8_t *data, size_t len)
{
	char path[512];
	int fd;

	path_of(rel, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(len == 0 || write(fd, data, len) == (ssize_t)len);
	FUZZ_CHECK(close(fd) == 0);
}

static void drop(const char *rel)
{
	char path[512];

	path_of(rel, path, sizeof(path));
	FUZZ_CHECK(unlink(path) == 0 || errno == ENOENT);
}

static void make_dir(const char *rel)
{
	char path[512];

	path_of(rel, path, sizeof(path));
	FUZZ_CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void cleanup(void)
{
	static const char *const files[] = {"v2/" SANDBOX "/cpu.stat",
					    "v2/" SANDBOX "/memory.max",
					    "v2/" SANDBOX "/cpu.max",
					    "v2/cgroup.controllers",
					    "cpuacct/" SANDBOX "/cpuacct.usage",
					    "cpuacct/cpuacct.usage",
					    "memory/" SANDBOX "/memory.limit_in_bytes"};
	static const char *const dirs[] = {
	    "v2/" SANDBOX, "v2", "cpuacct/" SANDBOX, "cpuacct", "memory/" SANDBOX, "memory", ""};
	char path[512];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		drop(files[i]);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		path_of(dirs[i], path, sizeof(path));
		(void)rmdir(path);
	}
}

/* The tree: a v2 root (with cgroup.controllers, as a real one has) and a
 * v1 cpuacct root with its memory sibling, each with one sandbox. In
 * memory (/dev/shm) when possible: every input rewrites files, which is
 * ten times slower on a disk. */
static void setup(void)
{
	const char *tmp = getenv("TMPDIR");
	int w;

	if (access("/dev/shm", W_OK) == 0)
		tmp = "/dev/shm";
	w = snprintf(base, sizeof(base), "%s/meter-fuzz-cgroup-XXXXXX", tmp && *tmp ? tmp : "/tmp");

	FUZZ_CHECK(w > 0 && (size_t)w < sizeof(base));
	FUZZ_CHECK(mkdtemp(base) != NULL);
	make_dir("v2");
	make_dir("v2/" SANDBOX);
	put("v2/cgroup.controllers", (const uint8_t *)"cpu memory\n", 11);
	make_dir("cpuacct");
	make_dir("cpuacct/" SANDBOX);
	put("cpuacct/cpuacct.usage", (const uint8_t *)"0\n", 2);
	make_dir("memory");
	make_dir("memory/" SANDBOX);
	FUZZ_CHECK(atexit(cleanup) == 0);
}

/* The oracle's number: the whole text (one trailing newline allowed) as a
 * decimal in [0, INT64_MAX] without sign or leading zeros ("-0" counts as
 * 0, as parse_int64 reads it). */
static bool number(const char *s, size_t len, int64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (len > 0 && s[len - 1] == '\n')
		len--;
	if (len == 2 && s[0] == '-' && s[1] == '0') {
		*out = 0;
		return true;
	}
	if (len == 0 || (s[0] == '0' && len > 1))
		return false;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v > ((uint64_t)INT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = (int64_t)v;
	return true;
}

static bool is_max(const char *s, size_t len)
{
	return (len == 3 && memcmp(s, "max", 3) == 0) || (len == 4 && memcmp(s, "max\n", 4) == 0);
}

static int64_t limit_mib(int64_t bytes)
{
	return bytes >= UNLIMITED ? -1 : bytes / (INT64_C(1) << 20);
}

struct expect {
	bool kept;
	int64_t cpu_usec, memory_mib;
	int32_t vcpus;
};

/* What the v2 files (text[i] of len[i] bytes, NULL when absent; each cut at
 * its first NUL, as a C string reads it) should give. */
static struct expect expect_v2(const char *const *text, const size_t *len)
{
	struct expect e = {.memory_mib = -1};
	bool found = false;
	int64_t v;

	if (!text[0])
		return e;
	/* cpu.stat: the first line "usage_usec N" decides. */
	for (size_t at = 0; at < len[0];) {
		size_t end = at;

		while (end < len[0] && text[0][end] != '\n')
			end++;
		if (end - at > 11 && memcmp(text[0] + at, "usage_usec ", 11) == 0) {
			found = number(text[0] + at + 11, end - at - 11, &e.cpu_usec) &&
				e.cpu_usec <= CPU_USEC_MAX;
			break;
		}
		if (end - at == 11 && memcmp(text[0] + at, "usage_usec ", 11) == 0)
			break; /* an empty value */
		at = end + 1;
	}
	if (!found)
		return e;
	if (text[1]) {
		if (is_max(text[1], len[1]))
			e.memory_mib = -1;
		else if (number(text[1], len[1], &v))
			e.memory_mib = limit_mib(v);
		else
			return e;
	}
	if (text[2]) {
		const char *sp = memchr(text[2], ' ', len[2]);
		int64_t quota, period;
		size_t qlen;

		if (!sp)
			return e;
		qlen = (size_t)(sp - text[2]);
		if (!number(sp + 1, len[2] - qlen - 1, &period) || period < 1)
			return e;
		if (!is_max(text[2], qlen)) {
			int64_t vcpus;

			if (!number(text[2], qlen, &quota))
				return e;
			vcpus = quota / period + (quota % period != 0);
			if (vcpus < 1 || vcpus > 1024)
				return e;
			e.vcpus = (int32_t)vcpus;
		}
	}
	e.kept = true;
	return e;
}

/* What the v1 files should give (as expect_v2). */
static struct expect expect_v1(const char *const *text, const size_t *len)
{
	struct expect e = {.memory_mib = -1};
	int64_t ns, bytes;

	if (!text[0] || !number(text[0], len[0], &ns) || ns / 1000 > CPU_USEC_MAX)
		return e;
	e.cpu_usec = ns / 1000;
	if (text[1]) {
		if (!number(text[1], len[1], &bytes))
			return e;
		e.memory_mib = limit_mib(bytes);
	}
	e.kept = true;
	return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text[3] = {NULL, NULL, NULL};
	size_t len[3] = {0, 0, 0}, start = 1, part = 0;
	const char *const *files;
	struct sample_batch b;
	struct expect e;
	char root[512], err[256];
	bool v1;

	if (size < 1 || size > 3 * FILE_MAX)
		return 0;
	if (!base[0])
		setup();
	v1 = data[0] & 1;
	files = v1 ? v1_files : v2_files;
	for (size_t i = 1; i <= size && part < 3; i++) {
		if (i == size || data[i] == 0xff) {
			bool exists = data[0] & (2u << part);

			if (exists && files[part] && i - start <= FILE_MAX) {
				const char *t = (const char *)data + start;
				const char *nul = memchr(t, '\0', i - start);

				put(files[part], data + start, i - start);
				text[part] = t;
				len[part] = nul ? (size_t)(nul - t) : i - start;
			} else if (files[part]) {
				drop(files[part]);
			}
			part++;
			start = i + 1;
		}
	}
	for (; part < 3; part++)
		if (files[part])
			drop(files[part]);
	e = v1 ? expect_v1(text, len) : expect_v2(text, len);

	path_of(v1 ? "cpuacct" : "v2", root, sizeof(root));
	FUZZ_CHECK(cgroup_read_all(root, "host-1", NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	FUZZ_CHECK(b.n == (e.kept ? 1u : 0u));
	FUZZ_CHECK(strcmp(b.host_id, "host-1") == 0 && b.sampled_at_usec == NOW_USEC);
	if (b.n == 1) {
		const struct meter_sample *s = &b.items[0];

		FUZZ_CHECK(strcmp(s->sandbox_id, SANDBOX) == 0 && s->key_id[0] == '\0');
		FUZZ_CHECK(s->u.state == SANDBOX_RUNNING && s->u.at_usec == NOW_USEC);
		FUZZ_CHECK(s->u.cpu_usec == e.cpu_usec);
		FUZZ_CHECK(s->u.memory_mib == e.memory_mib);
		FUZZ_CHECK(s->u.vcpus == e.vcpus);
		FUZZ_CHECK(s->u.storage_mib == SAMPLE_UNKNOWN);
	}
	sample_batch_release(&b);
	return 0;
}
