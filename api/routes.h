/* meter API: the routing table.
 *
 * One static table of routes with designated initializers. A path pattern is
 * a literal path whose segments may be "{name}": such a segment matches any
 * one non-empty segment that is a valid id (parse_is_id) and is captured into
 * req->params in order. */
#ifndef METER_ROUTES_H
#define METER_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "http.h"

typedef void (*route_handler)(struct http_req *req);

/* Where a route's handler runs. */
enum route_lane {
	/* On the HTTP thread that read the request: it never waits (or
	 * parks the request and answers from elsewhere, as checks and
	 * exports do). */
	ROUTE_LANE_HTTP,
	/* On a read worker: it waits on PostgreSQL and answers. */
	ROUTE_LANE_READ,
	/* On a write worker: the same, for what changes something, so that
	 * no slow read holds it up. */
	ROUTE_LANE_WRITE,
	ROUTE_LANES
};

struct route {
	const char *method; /* "GET", "POST", "PUT" */
	const char *path;   /* pattern, e.g. "/v1/sandboxes/{id}" */
	unsigned roles;	    /* enum http_role bits allowed */
	size_t max_body;    /* body cap in bytes; 0 = no body accepted */
	route_handler handler;
	bool session; /* a dashboard session cookie may stand for the bearer token */
	/* Where the handler runs; ROUTE_LANE_HTTP (0) unless it waits on
	 * PostgreSQL. Only handlers that run there may park the request. */
	enum route_lane lane;
	/* Answers whatever the database's schema is (it does not use the
	 * database, or reads the schema itself): the schema gate
	 * (schema_gate.h) does not hold it back. Every other route is
	 * answered 503 while the schema is not this binary's. */
	bool any_schema;
};

extern const struct route routes[];
extern const size_t routes_count;

enum route_match {
	ROUTE_FOUND,
	ROUTE_NO_PATH,	 /* 404 */
	ROUTE_NO_METHOD, /* 405: the path exists under other methods */
	ROUTE_BAD_ID,	 /* 400: a {…} segment is not a valid id */
};

/* Matches method and path against the table. ROUTE_FOUND sets *out and
 * fills req->params. ROUTE_NO_METHOD writes the allowed methods
 * ("GET, PUT") into allow. ROUTE_BAD_ID names the parameter in allow. */
enum route_match routes_match(const char *method, const char *path, struct http_req *req,
			      const struct route **out, char *allow, size_t allowlen);

#endif
