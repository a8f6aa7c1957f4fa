/* meter API: usage and cost (GET /v1/usage), and the JSON shapes of usage
 * and cost objects every read route shares. */
#ifndef METER_H_USAGE_H
#define METER_H_USAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "db_usage.h"
#include "http.h"

#define H_USAGE_DAY_USEC	 INT64_C(86400000000)
#define H_USAGE_RANGE_MAX	 (366 * H_USAGE_DAY_USEC) /* any range */
#define H_USAGE_HOURLY_RANGE_MAX (31 * H_USAGE_DAY_USEC)  /* window=hour */
#define H_USAGE_ITEMS_MAX	 10000
/* An item's jansson tree, at most (measured: 3,221 bytes with its
 * allocator's overhead, for a day's item grouped by sandbox). */
#define H_USAGE_ITEM_TREE_BYTES 3300

/* GET /v1/usage?from&to&window=hour|day&group_by=sandbox|key[&account_id]
 * -> {from, to, window, group_by, time_zone, usage, cost, items:[...]} */
void h_usage_get(struct http_req *req);

/* New JSON objects: the usage object {running_seconds, paused_seconds,
 * cpu_used_millicore_seconds, cpu_billed_millicore_seconds,
 * memory_mib_seconds, storage_mib_seconds} and the cost object
 * {cpu_micros, memory_micros, storage_micros, total_micros}. */
json_t *h_usage_json(const struct db_usage *u);
json_t *h_cost_json(const struct db_usage *u);

/* Reads ?from and ?to: both or neither (*has tells), from before to, at
 * most max_usec apart. */
bool h_usage_range(struct http_req *req, int64_t max_usec, bool *has, int64_t *from_usec,
		   int64_t *to_usec);

#endif
