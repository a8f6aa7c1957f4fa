/* meter API: authentication and role checks (see auth.h).
 * Service tokens only for now; account keys arrive with the keys work. */
#include "auth.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "routes.h"

/* Constant-time equality of a presented token and a configured one. */
static bool token_equal(const char *presented, const char *configured)
{
	size_t n = strlen(presented);

	if (configured[0] == '\0' || n != strlen(configured))
		return false;
	return CRYPTO_memcmp(presented, configured, n) == 0;
}

bool auth_authorize(struct http_req *req)
{
	const struct meter_config *cfg = req->app->cfg;
	const char *h = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
	struct auth *a = calloc(1, sizeof(*a));

	if (!a) {
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return false;
	}
	req->auth = a;
	a->kind = AUTH_NONE;
	a->role = ROLE_PUBLIC;
	if (req->route->roles & ROLE_PUBLIC)
		return true;
	if (!h || strncmp(h, "Bearer ", 7) != 0 || h[7] == '\0') {
		http_reply_error(req, 401, "unauthorized", "missing or malformed bearer token",
				 NULL);
		return false;
	}
	h += 7;
	if (token_equal(h, cfg->operator_token)) {
		a->kind = AUTH_OPERATOR;
		a->role = ROLE_OPERATOR;
	} else if (token_equal(h, cfg->control_plane_token)) {
		a->kind = AUTH_CONTROL_PLANE;
		a->role = ROLE_CONTROL_PLANE;
	} else {
		http_reply_error(req, 401, "unauthorized", "unknown credentials", NULL);
		return false;
	}
	if (!(req->route->roles & a->role)) {
		http_reply_error(req, 403, "forbidden", "this credential may not call this route",
				 NULL);
		return false;
	}
	return true;
}
