/* meter: reading sandboxes from a cgroup directory (DESIGN.md §3).
 *
 * Every sub-directory of root is a sandbox; its name is the sandbox id
 * (names that are not valid ids are skipped and logged once). cgroup v2:
 * cpu.stat usage_usec, memory.max (a number of bytes; "max" or absent =
 * unknown), cpu.max (quota/period -> vCPUs, rounded up; "max" or absent =
 * unknown). cgroup v1 (detected: cpuacct.usage present): cpuacct.usage in
 * ns (-> µs, rounded down), memory from the matching directory of the
 * memory hierarchy (root with its "cpuacct" path component replaced by
 * "memory", file memory.limit_in_bytes; the kernel's "unlimited" value =
 * unknown). Unknown vcpus are 0 and unknown memory SAMPLE_UNKNOWN; ingestion
 * fills them from the sandbox record. A cgroup sandbox is always "running"
 * (a frozen or removed cgroup simply stops growing or disappears). */
#ifndef METER_SOURCE_CGROUP_H
#define METER_SOURCE_CGROUP_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"
#include "sample.h"

enum cgroup_version { CGROUP_UNKNOWN, CGROUP_V1, CGROUP_V2 };

/* Which layout root has: v2 when it (or a sub-directory) has cgroup.controllers
 * or cpu.stat, v1 when cpuacct.usage is there. */
enum cgroup_version cgroup_detect(const char *root);

/* Reads every sandbox under root into out (empty on entry), stamped with
 * host_id and now_usec. A sandbox whose files vanish mid-read (removed) is
 * skipped; an unreadable root is METER_EIO with err set. */
METER_MUSTCHECK enum meter_rc cgroup_read_all(const char *root, const char *host_id,
					      int64_t now_usec, struct sample_batch *out, char *err,
					      size_t errlen);

#endif
