/* meter API: serving the OpenAPI document (see openapi.h). */
#include "openapi.h"

#include "h_util.h"

void h_openapi(struct http_req *req)
{
	static const char *const query[] = {NULL};

	if (!http_query_allowed(req, query))
		return;
	http_reply_static(req, 200, "application/json", openapi_json, openapi_json_len);
}
