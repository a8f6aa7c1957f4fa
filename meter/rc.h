/* meter: result codes shared by every module.
 *
 * Fallible functions return enum meter_rc and are marked METER_MUSTCHECK so a
 * caller cannot drop an error on the floor. */
#ifndef METER_RC_H
#define METER_RC_H

#define METER_MUSTCHECK __attribute__((warn_unused_result))

enum meter_rc {
	METER_OK = 0,
	METER_EINVAL,	 /* bad argument or malformed input */
	METER_ERANGE,	 /* value out of range, or arithmetic would overflow */
	METER_ENOMEM,	 /* allocation failed */
	METER_EIO,	 /* file, socket or pipe I/O failed */
	METER_EDB,	 /* database unreachable or a query failed */
	METER_ENOTFOUND, /* the thing asked for does not exist */
	METER_ECONFLICT, /* the request contradicts stored state */
};

/* Short, stable, lower-case name of rc; a static string (borrowed). */
const char *meter_rc_str(enum meter_rc rc);

#endif
