/* meter: reading sandboxes from a cgroup directory (see source_cgroup.h).
 *
 * Each sandbox directory is opened once (openat on the root's descriptor)
 * and its few small files read relative to it, so a directory removed
 * between readdir and the reads shows up as ENOENT/ENODEV on one sandbox,
 * which is then skipped as gone. Decisions the header leaves open:
 * - Memory limits are converted to MiB rounding down; a limit of 2^62 bytes
 *   or more (the kernel's "unlimited" is LONG_MAX rounded to a page) is
 *   unknown. vCPUs come from cpu.max rounded up and must be 1 to 1024.
 * - v1 reads no CPU quota (vcpus unknown); its memory hierarchy is found by
 *   replacing the path component that names cpuacct ("cpuacct",
 *   "cpu,cpuacct" or "cpuacct,cpu") with "memory".
 * - A sandbox whose files hold garbage (or whose cpu.stat lacks usage_usec)
 *   is skipped, logged once per sandbox and reason; the others are read.
 * - The batch is sorted by sandbox id. An empty root gives an empty batch; a
 *   root with sub-directories but no cgroup files is METER_EIO. */
#include "source_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"
#include "parse.h"

#define CG_FILE_MAX	  8192		     /* bytes read from one cgroup file */
#define CG_UNLIMITED	  (INT64_C(1) << 62) /* bytes: this or more = no limit */
#define CG_CPU_USEC_MAX	  (INT64_C(1) << 62) /* as in the agent document */
#define CG_VCPUS_MAX	  INT64_C(1024)
#define CG_BYTES_PER_MIB  (INT64_C(1) << 20)
#define CG_LOG_ONCE_SLOTS 1024

/* Hashes of the (name, reason) pairs already logged. Bounded: past
 * CG_LOG_ONCE_SLOTS distinct problems, new ones are not logged again. */
static pthread_mutex_t cg_log_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t cg_logged[CG_LOG_ONCE_SLOTS];
static size_t cg_nlogged;

static uint64_t cg_hash(const char *a, const char *b)
{
	return hash_str(hash_byte(hash_str(HASH_START, a), 0xff), b) | 1;
}

/* True the first time (name, reason) is seen. */
static bool cg_log_once(const char *name, const char *reason)
{
	uint64_t h = cg_hash(name, reason);
	bool first = true;

	pthread_mutex_lock(&cg_log_lock);
	for (size_t i = 0; i < cg_nlogged; i++)
		if (cg_logged[i] == h)
			first = false;
	if (first) {
		if (cg_nlogged < CG_LOG_ONCE_SLOTS)
			cg_logged[cg_nlogged++] = h;
		else
			first = false;
	}
	pthread_mutex_unlock(&cg_log_lock);
	return first;
}

/* A directory entry's name made safe for a log line. */
static void cg_safe(const char *s, char *out, size_t outlen)
{
	size_t n = 0;

	for (; *s && n + 1 < outlen; s++)
		out[n++] =
		    (char)(((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f) ? *s : '?');
	out[n] = '\0';
}

static void cg_skip(const char *name, const char *reason)
{
	char safe[80];

	if (!cg_log_once(name, reason))
		return;
	cg_safe(name, safe, sizeof(safe));
	log_warn("cgroup: sandbox \"%s\" skipped: %s", safe, reason);
}

enum cg_read {
	CG_READ_OK,
	CG_READ_ABSENT, /* no such file (or the cgroup is being removed) */
	CG_READ_FAILED, /* any other error, or too long */
};

/* Reads file name relative to dfd into buf (NUL-terminated, at most
 * CG_FILE_MAX - 1 bytes). */
static enum cg_read cg_read_at(int dfd, const char *name, char *buf, size_t buflen)
{
	size_t len = 0;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	enum cg_read r = CG_READ_OK;

	if (fd < 0)
		return (errno == ENOENT || errno == ENODEV) ? CG_READ_ABSENT : CG_READ_FAILED;
	for (;;) {
		ssize_t n = read(fd, buf + len, buflen - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = (errno == ENODEV || errno == ENOENT) ? CG_READ_ABSENT : CG_READ_FAILED;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == buflen - 1) {
			r = CG_READ_FAILED; /* longer than any cgroup file we read */
			break;
		}
	}
	close(fd);
	buf[len] = '\0';
	return r;
}

/* Parses a file holding one decimal number and a newline (the newline is
 * optional) into *v in [0, INT64_MAX]; "max" gives *is_max when allowed. */
static bool cg_parse_value(char *text, bool allow_max, int64_t *v, bool *is_max)
{
	size_t n = strlen(text);

	if (n > 0 && text[n - 1] == '\n')
		text[--n] = '\0';
	if (is_max)
		*is_max = false;
	if (allow_max && strcmp(text, "max") == 0) {
		*is_max = true;
		return true;
	}
	return parse_int64(text, 0, INT64_MAX, v) == METER_OK;
}

/* usage_usec from a v2 cpu.stat ("key value" lines). */
static bool cg_parse_cpu_stat(char *text, int64_t *usec)
{
	char *line = text;

	while (*line) {
		char *nl = strchr(line, '\n');
		char *sp;

		if (nl)
			*nl = '\0';
		sp = strchr(line, ' ');
		if (sp && (size_t)(sp - line) == strlen("usage_usec") &&
		    strncmp(line, "usage_usec", (size_t)(sp - line)) == 0)
			return parse_int64(sp + 1, 0, CG_CPU_USEC_MAX, usec) == METER_OK;
		if (!nl)
			break;
		line = nl + 1;
	}
	return false;
}

/* A memory limit in bytes as MiB (rounded down), or SAMPLE_UNKNOWN. */
static int64_t cg_limit_mib(int64_t bytes)
{
	if (bytes >= CG_UNLIMITED)
		return SAMPLE_UNKNOWN;
	return bytes / CG_BYTES_PER_MIB;
}

/* Fills s from the v2 files of the sandbox directory dfd. Returns false
 * with *reason set (NULL: vanished) when the sandbox is skipped. */
static bool cg_read_v2(int dfd, struct meter_sample *s, const char **reason)
{
	char buf[CG_FILE_MAX];
	enum cg_read r;
	int64_t v;
	bool is_max;

	*reason = NULL;
	r = cg_read_at(dfd, "cpu.stat", buf, sizeof(buf));
	if (r == CG_READ_ABSENT)
		return false;
	if (r != CG_READ_OK || !cg_parse_cpu_stat(buf, &s->u.cpu_usec)) {
		*reason = "cpu.stat has no valid usage_usec";
		return false;
	}

	r = cg_read_at(dfd, "memory.max", buf, sizeof(buf));
	if (r == CG_READ_OK) {
		if (!cg_parse_value(buf, true, &v, &is_max)) {
			*reason = "memory.max is not a number of bytes or \"max\"";
			return false;
		}
		s->u.memory_mib = is_max ? SAMPLE_UNKNOWN : cg_limit_mib(v);
	} else if (r == CG_READ_FAILED) {
		*reason = "memory.max unreadable";
		return false;
	}

	r = cg_read_at(dfd, "cpu.max", buf, sizeof(buf));
	if (r == CG_READ_OK) {
		char *sp = strchr(buf, ' ');
		int64_t quota = 0, period = 0;

		if (!sp) {
			*reason = "cpu.max is not \"QUOTA PERIOD\"";
			return false;
		}
		*sp = '\0';
		if (!cg_parse_value(sp + 1, false, &period, NULL) || period < 1 ||
		    !cg_parse_value(buf, true, &quota, &is_max)) {
			*reason = "cpu.max is not \"QUOTA PERIOD\"";
			return false;
		}
		if (!is_max) {
			int64_t vcpus = quota / period + (quota % period != 0);

			if (vcpus < 1 || vcpus > CG_VCPUS_MAX) {
				*reason = "cpu.max gives fewer than 1 or more than 1024 vCPUs";
				return false;
			}
			s->u.vcpus = (int32_t)vcpus;
		}
	} else if (r == CG_READ_FAILED) {
		*reason = "cpu.max unreadable";
		return false;
	}
	return true;
}

/* Fills s from cpuacct.usage of dfd and, when mem_dfd >= 0, from the
 * sandbox's memory.limit_in_bytes under it. As cg_read_v2 otherwise. */
static bool cg_read_v1(int dfd, int mem_dfd, const char *name, struct meter_sample *s,
		       const char **reason)
{
	char buf[CG_FILE_MAX], path[PARSE_ID_MAX + 32];
	enum cg_read r;
	int64_t ns, bytes;

	*reason = NULL;
	r = cg_read_at(dfd, "cpuacct.usage", buf, sizeof(buf));
	if (r == CG_READ_ABSENT)
		return false;
	if (r != CG_READ_OK || !cg_parse_value(buf, false, &ns, NULL) ||
	    ns / 1000 > CG_CPU_USEC_MAX) {
		*reason = "cpuacct.usage is not a number of nanoseconds";
		return false;
	}
	s->u.cpu_usec = ns / 1000;

	if (mem_dfd < 0)
		return true;
	/* name is an id (parse_is_id), so it fits; else not read as another's */
	if ((size_t)snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", name) >=
	    sizeof(path)) {
		*reason = "its name is too long for a memory cgroup's path";
		return false;
	}
	r = cg_read_at(mem_dfd, path, buf, sizeof(buf));
	if (r == CG_READ_OK) {
		if (!cg_parse_value(buf, false, &bytes, NULL)) {
			*reason = "memory.limit_in_bytes is not a number";
			return false;
		}
		s->u.memory_mib = cg_limit_mib(bytes);
	} else if (r == CG_READ_FAILED) {
		*reason = "memory.limit_in_bytes unreadable";
		return false;
	}
	return true;
}

/* The v1 memory hierarchy's directory matching root, into out; false when
 * root has no cpuacct component. */
static bool cg_memory_root(const char *root, char *out, size_t outlen)
{
	static const char *const names[] = {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"};
	const char *p = root;

	while (*p) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			if (len == strlen(names[i]) && strncmp(p, names[i], len) == 0) {
				int w = snprintf(out, outlen, "%.*smemory%s", (int)(p - root), root,
						 p + len);

				return w > 0 && (size_t)w < outlen;
			}
		}
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

static bool cg_has(int dfd, const char *name)
{
	return faccessat(dfd, name, F_OK, 0) == 0;
}

static enum cgroup_version cg_detect_at(int dfd)
{
	/* v1's cpu controller has a cpu.stat too (throttling counts, no
	 * usage_usec), beside cpuacct.usage where the two are mounted
	 * together; v2 has no cpuacct files and v1 no cgroup.controllers. */
	if (cg_has(dfd, "cgroup.controllers"))
		return CGROUP_V2;
	if (cg_has(dfd, "cpuacct.usage"))
		return CGROUP_V1;
	if (cg_has(dfd, "cpu.stat"))
		return CGROUP_V2;
	return CGROUP_UNKNOWN;
}

/* True when entry e of the directory dfd is a directory. */
static bool cg_is_dir(int dfd, const struct dirent *e)
{
	struct stat st;

	if (e->d_type == DT_DIR)
		return true;
	if (e->d_type != DT_UNKNOWN)
		return false;
	return fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

enum cgroup_version cgroup_detect(const char *root)
{
	enum cgroup_version v = CGROUP_UNKNOWN;
	struct dirent *e;
	DIR *d;
	int fd;

	if (!root)
		return CGROUP_UNKNOWN;
	d = opendir(root);
	if (!d)
		return CGROUP_UNKNOWN;
	fd = dirfd(d);
	v = cg_detect_at(fd);
	while (v == CGROUP_UNKNOWN && (e = readdir(d))) {
		int sub;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    !cg_is_dir(fd, e))
			continue;
		sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sub < 0)
			continue;
		v = cg_detect_at(sub);
		close(sub);
	}
	closedir(d);
	return v;
}

static int cg_cmp_samples(const void *a, const void *b)
{
	return strcmp(((const struct meter_sample *)a)->sandbox_id,
		      ((const struct meter_sample *)b)->sandbox_id);
}

enum meter_rc cgroup_read_all(const char *root, const char *host_id, int64_t now_usec,
			      struct sample_batch *out, char *err, size_t errlen)
{
	char mem_root[4096];
	enum cgroup_version v;
	struct dirent *e;
	bool any_dir = false;
	int fd, mem_fd = -1;
	DIR *d = NULL;
	enum meter_rc rc = METER_OK;

	if (err && errlen)
		err[0] = '\0';
	if (!root || !out || !parse_is_id(host_id)) {
		if (err && errlen)
			(void)snprintf(err, errlen, "cgroup: bad root or host id");
		return METER_EINVAL;
	}
	sample_batch_init(out);
	(void)snprintf(out->host_id, sizeof(out->host_id), "%s", host_id);
	out->sampled_at_usec = now_usec;
	d = opendir(root);
	if (!d) {
		if (err && errlen)
			(void)snprintf(err, errlen, "cgroup: cannot read %.200s: %s", root,
				       strerror(errno));
		return METER_EIO;
	}
	v = cgroup_detect(root);
	fd = dirfd(d);
	if (v == CGROUP_V1 && cg_memory_root(root, mem_root, sizeof(mem_root)))
		mem_fd = open(mem_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	while ((e = readdir(d))) {
		struct meter_sample s;
		const char *reason = NULL;
		bool ok;
		int sfd;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    !cg_is_dir(fd, e))
			continue;
		any_dir = true;
		if (!parse_is_id(e->d_name)) {
			cg_skip(e->d_name, "its name is not a sandbox id");
			continue;
		}
		if (v == CGROUP_UNKNOWN)
			continue;
		sfd = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd < 0)
			continue; /* removed since readdir */
		memset(&s, 0, sizeof(s));
		memcpy(s.sandbox_id, e->d_name, strlen(e->d_name) + 1);
		s.u.at_usec = now_usec;
		s.u.state = SANDBOX_RUNNING;
		s.state_from_events = true;
		s.u.vcpus = 0;
		s.u.memory_mib = SAMPLE_UNKNOWN;
		s.u.storage_mib = SAMPLE_UNKNOWN;
		if (v == CGROUP_V2)
			ok = cg_read_v2(sfd, &s, &reason);
		else
			ok = cg_read_v1(sfd, mem_fd, e->d_name, &s, &reason);
		close(sfd);
		if (!ok) {
			if (reason)
				cg_skip(e->d_name, reason);
			continue;
		}
		rc = sample_batch_push(out, &s);
		if (rc != METER_OK) {
			if (err && errlen)
				(void)snprintf(err, errlen, "cgroup: %s: %s", root,
					       rc == METER_ERANGE ? "too many sandboxes"
								  : "out of memory");
			goto out;
		}
	}
	if (v == CGROUP_UNKNOWN && any_dir) {
		if (err && errlen)
			(void)snprintf(err, errlen,
				       "cgroup: %.200s holds neither cgroup v1 nor v2 files", root);
		rc = METER_EIO;
		goto out;
	}
	if (out->n > 1)
		qsort(out->items, out->n, sizeof(*out->items), cg_cmp_samples);
out:
	if (mem_fd >= 0)
		close(mem_fd);
	closedir(d);
	if (rc != METER_OK) {
		sample_batch_release(out);
		sample_batch_init(out);
	}
	return rc;
}
