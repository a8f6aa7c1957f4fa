/* meter: the http(s) URLs meter calls (host agents, the webhook), read as
 * libcurl reads them for the requests. */
#ifndef METER_URL_H
#define METER_URL_H

#include <stdbool.h>
#include <stddef.h>

/* True when libcurl reads url as an http:// or https:// URL with a host.
 * Otherwise false, with err the end of a sentence whose subject is the URL
 * ("has no host"), never the URL itself: it may carry a password. */
bool url_http_ok(const char *url, char *err, size_t errlen);

#endif
