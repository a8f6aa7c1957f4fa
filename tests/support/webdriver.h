/* A small WebDriver client for browser tests: drives Debian's chromium
 * (headless) through chromedriver's HTTP API with libcurl. */
#ifndef METER_TEST_WEBDRIVER_H
#define METER_TEST_WEBDRIVER_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

struct webdriver {
	pid_t driver_pid;
	int port;
	char base[64];	   /* http://127.0.0.1:PORT */
	char session[128]; /* WebDriver session id */
	char profile[64];  /* a throwaway user-data-dir */
};

/* Starts chromedriver on a free port and a headless chromium session.
 * Returns 0, or -1 after printing why (chromium or chromedriver missing:
 * *missing is set so the caller can skip). */
int wd_start(struct webdriver *wd, bool *missing);
/* Ends the session, stops chromedriver, removes the profile. */
void wd_stop(struct webdriver *wd);

/* Navigates to url and waits for the page to load. 0 on success. */
int wd_get(struct webdriver *wd, const char *url);
/* The current URL (malloc'd) or NULL. */
char *wd_url(struct webdriver *wd);
/* Waits up to timeout_ms for the current URL to contain want and not
 * contain unwanted (may be NULL): a click that submits a form returns
 * before the browser has navigated. 0 when it did. */
int wd_wait_url(struct webdriver *wd, const char *want, const char *unwanted, int timeout_ms);
/* Waits up to timeout_ms for the page's HTML to contain needle. 0 when it did. */
int wd_wait_source(struct webdriver *wd, const char *needle, int timeout_ms);
/* The page's HTML (malloc'd) or NULL. */
char *wd_source(struct webdriver *wd);
/* The visible text of the first element matching css (malloc'd), or NULL. */
char *wd_text(struct webdriver *wd, const char *css);
/* Types text into the element matching css. 0 on success. */
int wd_type(struct webdriver *wd, const char *css, const char *text);
/* Clicks the element matching css. 0 on success. */
int wd_click(struct webdriver *wd, const char *css);
/* Saves a PNG screenshot to path. 0 on success. */
int wd_screenshot(struct webdriver *wd, const char *path);
/* The browser console's entries at level SEVERE since the last call, as a
 * new JSON array (may be empty), or NULL. */
json_t *wd_console_errors(struct webdriver *wd);
/* The value of cookie name (malloc'd; HttpOnly cookies included) or NULL. */
char *wd_cookie(struct webdriver *wd, const char *name);

#endif
