/* meter: the http(s) URLs meter calls (see url.h).
 *
 * A prefix test alone let "http://" and "http://:80/" through: every
 * request to such a URL then fails, and a webhook event waits forever.
 * libcurl's URL parser is the one its requests use, so what it accepts here
 * is what a request will be sent to. */
#include "url.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

bool url_http_ok(const char *url, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	CURLUcode uc;
	bool ok = false;

	if (!u) {
		(void)snprintf(err, errlen, "out of memory");
		return false;
	}
	uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
	if (uc != CURLUE_OK) {
		(void)snprintf(err, errlen, "is not a URL libcurl reads (%s)",
			       curl_url_strerror(uc));
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
	ok = true;
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}
