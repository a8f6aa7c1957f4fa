/* meter: result codes. */
#include "rc.h"

const char *meter_rc_str(enum meter_rc rc)
{
	switch (rc) {
	case METER_OK:
		return "ok";
	case METER_EINVAL:
		return "invalid";
	case METER_ERANGE:
		return "out of range";
	case METER_ENOMEM:
		return "out of memory";
	case METER_EIO:
		return "i/o error";
	case METER_EDB:
		return "database error";
	case METER_ENOTFOUND:
		return "not found";
	case METER_ECONFLICT:
		return "conflict";
	}
	return "unknown";
}
