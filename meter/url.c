/* meter: the http(s) URLs meter calls (see url.h).
 *
 * A prefix test alone let "http://" and "http://:80/" through: every
 * request to such a URL then fails, and a webhook event waits forever.
 * libcurl's URL parser is the one its requests use, so what it accepts here
 * is what a request will be sent to. */
#include "url.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool url_http_ok(const char *url, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	CURLUcode uc;
	bool ok = false;

	if (!u) {
		(void)snprintf(err, errlen, "out of memory");
		return false;
	}
	uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
	if (uc == CURLUE_NO_HOST) {
		(void)snprintf(err, errlen, "has no host");
		goto out;
	}
	if (uc == CURLUE_BAD_PORT_NUMBER) {
		(void)snprintf(err, errlen, "has a port that is not 1 to 65535");
		goto out;
	}
	if (uc != CURLUE_OK) {
		(void)snprintf(err, errlen, "is not a URL libcurl reads (its error %d)", (int)uc);
		goto out;
	}
	if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
		(void)snprintf(err, errlen, "is not an http:// or https:// URL");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0]) {
		(void)snprintf(err, errlen, "has no host");
		goto out;
	}
	/* libcurl takes port 0, which nothing listens on. */
	if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && strtol(port, NULL, 10) == 0) {
		(void)snprintf(err, errlen, "has a port that is not 1 to 65535");
		goto out;
	}
	ok = true;
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return ok;
}
