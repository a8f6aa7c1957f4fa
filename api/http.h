/* meter API: one HTTP request as our handlers see it, and reply helpers.
 *
 * A struct http_req lives on the libmicrohttpd connection (req_cls) from the
 * first byte of the request to the completion callback, which frees it. The
 * body is read by our code into a buffer capped by the route's max_body. */
#ifndef METER_HTTP_H
#define METER_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parse.h"

struct answer_stream;
struct auth;

#define HTTP_BODY_MAX (64 * 1024) /* default body cap, bytes */
/* After a request whose body, or whose answer's build (http_answer_grow),
 * took more than this, the heaps' free pages go back to the system
 * (malloc_trim): glibc would keep the many small blocks freed. */
#define HTTP_TRIM_BYTES	    (1024 * 1024)
#define HTTP_JSON_DEPTH_MAX 16 /* nesting of any JSON body we accept */
#define HTTP_PARAMS_MAX	    4

/* Who may call a route: a bit set. */
enum http_role {
	ROLE_PUBLIC = 1u << 0,	      /* no credentials needed */
	ROLE_OPERATOR = 1u << 1,      /* the operator token */
	ROLE_CONTROL_PLANE = 1u << 2, /* the control plane's token */
	ROLE_FULL = 1u << 3,	      /* an account key with role full */
	ROLE_READ_ONLY = 1u << 4,     /* an account key with role read_only */
	ROLE_AGENT = 1u << 5,	      /* a host agent's token: pushes samples, nothing else */
};

struct app;
struct route;

struct http_req {
	struct MHD_Connection *conn;
	struct app *app;	   /* borrowed: the daemon's shared state */
	const struct route *route; /* NULL until routed */
	const char *method;	   /* borrowed from libmicrohttpd */
	const char *path;	   /* borrowed, without the query string */
	const char *version;	   /* borrowed: "HTTP/1.1" or "HTTP/1.0" */
	char request_id[24];
	int64_t start_usec; /* monotonic, for the access log */
	char *body;	    /* owned, NUL-terminated, body_len bytes */
	size_t body_len;
	size_t body_max;
	bool body_too_large;
	bool body_no_memory;  /* with body_too_large: dropped for want of memory */
	bool path_escape_bad; /* %00 or %2F in the path (as sent) */
	/* Where the request target ends as a C string, as libmicrohttpd
	 * handed it over before touching it (server.c's head check). */
	const char *target_end;
	bool query_cut; /* too many query parameters: not parsed (server.c) */
	bool started;
	bool handled;
	bool suspended; /* the handler parked the connection */
	/* The credentials need a look-up in the database, which a request
	 * worker makes (auth_finish) once the whole request is in; until
	 * then nothing has been decided or answered. */
	bool auth_pending;
	/* The body is read and dropped, never kept: set when the look-up is
	 * for an account key on a route no account key may call, whose
	 * answer is a refusal whatever the key (server.c). */
	bool body_ignored;
	/* Called (when set) right after the connection is parked: the place
	 * to hand work to another thread, which may then resume it at once. */
	void (*on_suspended)(struct http_req *req);
	void *handler_ctx;	    /* the parked handler's own state, its to free */
	struct http_req *work_next; /* the request workers' queue (api/server.c) */
	struct http_server *srv;    /* borrowed: the server that made it (api/server.c) */
	char params[HTTP_PARAMS_MAX][PARSE_ID_MAX + 1]; /* {…} path segments */
	struct auth *auth; /* owned: who is calling, set before the handler */
	int nparams;
	unsigned status;	   /* the response's status once decided */
	struct MHD_Response *resp; /* owned until queued */
	bool queued;
	/* An answer being built: the bytes counted for it (http_answer_grow),
	 * whether one was refused, and its stream (http_answer_stream). */
	int64_t building;
	int64_t building_most; /* the most building was */
	bool building_refused;
	bool building_linked; /* in http.c's list of answers being built */
	struct http_req *building_prev, *building_next;
	struct answer_stream *stream; /* owned until http_reply_stream */
};

/* Sets the response to status with body serialised compactly. Steals body
 * (it is freed here). A serialisation failure becomes a 500; a large body
 * past the answers' limit a 503, as http_reply_text. */
void http_reply_json(struct http_req *req, unsigned status, json_t *body);

/* Sets an error response {"error":{"code":code,"message":message,...extra}}.
 * extra (may be NULL) is an object whose fields are added; stolen. */
void http_reply_error(struct http_req *req, unsigned status, const char *code, const char *message,
		      json_t *extra);

/* Sets a response of content_type with a copy of text. The copy counts
 * towards the bytes of answers held (http_answers_limit_set): a large one
 * that would pass the limit is answered 503 metering_unavailable, reason
 * answers_memory, instead. */
void http_reply_text(struct http_req *req, unsigned status, const char *content_type,
		     const char *text, size_t len);

/* As http_reply_text, with text (malloc'd, len bytes) taken over, not
 * copied: freed here or once sent. */
void http_reply_owned(struct http_req *req, unsigned status, const char *content_type, char *text,
		      size_t len);

/* Sets a response of content_type with text itself, which lives as long as
 * the process (a document compiled in): no copy, nothing held. */
void http_reply_static(struct http_req *req, unsigned status, const char *content_type,
		       const char *text, size_t len);

#define HTTP_ANSWER_SMALL (64 * 1024) /* an answer this small is never refused */

/* The most bytes answers above HTTP_ANSWER_SMALL may hold together (the
 * configuration's answers_memory_mib), and the bytes held now. */
void http_answers_limit_set(int64_t bytes);
int64_t http_answers_held(void);
/* Of those over HTTP_ANSWER_SMALL's count, the bytes of answers being built
 * (http_answer_grow). */
int64_t http_answers_building(void);

/* An answer built whole in memory (a statement, usage items) is counted with the large
 * answers held while it is built, before its memory is taken, so that
 * answers being built and answers waiting for their clients together stay
 * within the limit: asks for delta more bytes for req's answer (a negative
 * delta gives bytes back and always succeeds). Refused (false, and
 * req->building_refused set) when other requests' large answers are held
 * or being built and this would take them all past the limit; the request
 * is then answered with http_reply_answers_full. One request's answer is
 * never refused while no other's is counted, and the oldest answer being
 * built is refused only for answers held for their clients (which go by
 * themselves), never for younger ones being built: together those may then
 * pass the limit by what the younger ones were given under it, until
 * their next growth is refused. What a request still has
 * counted when it ends is given back (http_answer_end). */
bool http_answer_grow(struct http_req *req, int64_t delta);

/* A stream (fopencookie) that builds req's answer in memory, each growth
 * of its buffer asked of http_answer_grow first: a write it refuses fails.
 * NULL when memory ran out. At most one per request; ended by
 * http_reply_stream. */
FILE *http_answer_stream(struct http_req *req);

/* Closes f (from http_answer_stream) and answers what it holds as the
 * response of content_type, its memory counted as held from then on; when
 * complete is false (the writer failed) or a write failed, answers instead
 * 503 reason answers_memory when the limit refused a write, 500 internal
 * when memory ran out. */
void http_reply_stream(struct http_req *req, unsigned status, const char *content_type, FILE *f,
		       bool complete);

/* As http_reply_json, for a large body built whole: its text is written
 * through http_answer_stream (counted as it grows), and counted, the bytes
 * the caller asked of http_answer_grow for body's tree, are given back once
 * the tree is freed. */
void http_reply_json_counted(struct http_req *req, unsigned status, json_t *body, int64_t counted);

/* The 503 (reason answers_memory, Retry-After: 1) of a large answer that
 * the limit refused. */
void http_reply_answers_full(struct http_req *req);

/* Gives back what req still has counted for an answer being built and
 * frees its stream; at the request's end (server.c). */
void http_answer_end(struct http_req *req);

/* Sets a response built by the caller (e.g. streamed from a callback).
 * Steals resp. */
void http_reply_response(struct http_req *req, unsigned status, struct MHD_Response *resp);

/* Checks that every query-string argument is named in allowed (a NULL-
 * terminated list), at most once, and holds no NUL byte in its name or
 * value. Otherwise sets a 400 invalid_request reply naming it (field) and
 * returns false. */
bool http_query_allowed(struct http_req *req, const char *const *allowed);

/* Parses the request body as one JSON object, rejecting nesting deeper than
 * HTTP_JSON_DEPTH_MAX, NUL bytes and invalid UTF-8. On success returns a new
 * reference; on failure sets a 400 invalid_request reply and returns NULL. */
json_t *http_json_body(struct http_req *req);

/* Copies at most PARSE_ID_MAX bytes of s (a name the client sent) into out
 * (PARSE_ID_MAX + 1 bytes) for an error reply, anything but printable ASCII
 * replaced by '?': a JSON string needs valid UTF-8, and a log line no
 * control bytes. */
void http_safe_name(const char *s, char *out);

/* The query-string argument name, borrowed from libmicrohttpd, or NULL
 * when it is not given. Given without '=' ("?key_id"), it is "": a filter
 * left without its value is judged as an empty one (refused where a value
 * is needed), never taken for no filter. */
const char *http_query(struct http_req *req, const char *name);

/* A request header, borrowed, or NULL. */
const char *http_header(struct http_req *req, const char *name);

/* Microseconds on the monotonic clock. */
int64_t http_now_usec(void);

#endif
