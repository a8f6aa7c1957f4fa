/* meter API: the OpenAPI 3.1 document of the API (api/openapi.json),
 * compiled into the binary and served at GET /v1/openapi.json.
 *
 * Every route of the routing table is documented there with its roles in
 * "x-meter-roles" (operator, control_plane, full, read_only, public);
 * tests/unit/test_openapi.c holds the two against each other. */
#ifndef METER_OPENAPI_H
#define METER_OPENAPI_H

#include <stddef.h>

#include "http.h"

extern const char openapi_json[]; /* NUL-terminated */
extern const size_t openapi_json_len;

/* GET /v1/openapi.json (public). */
void h_openapi(struct http_req *req);

#endif
